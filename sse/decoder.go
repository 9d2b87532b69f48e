package sse

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
)

// Frame is one dispatched SSE event, as EventSource would see it. ID is
// the last event id in force when it was dispatched, as the spec keeps it.
type Frame struct {
	ID    string
	Event string
	Data  string
	// IDSet reports whether this frame carried an id line itself.
	IDSet bool
}

// Decoder reads frames from a stream. Retry holds the last reconnection
// time the server asked for, in milliseconds (0: none yet).
type Decoder struct {
	r       *bufio.Reader
	lastID  string
	skipLF  bool
	Retry   int
	Comment func(string)
}

// MaxLine bounds one line, so a hostile server cannot grow a line forever.
const MaxLine = 16 << 20

// ErrLineTooLong is returned for a line over MaxLine.
var ErrLineTooLong = errors.New("sse: line too long")

// NewDecoder decodes frames from r.
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next dispatched frame. An unfinished frame at the end of
// the stream is dropped, as the spec says; io.EOF then ends the stream.
func (d *Decoder) Next() (Frame, error) {
	var data strings.Builder
	hasData := false
	var f Frame
	for {
		line, err := d.line()
		if err != nil {
			return Frame{}, err
		}
		if line == "" {
			if !hasData {
				f = Frame{}
				continue
			}
			f.ID = d.lastID
			f.Data = strings.TrimSuffix(data.String(), "\n")
			if f.Event == "" {
				f.Event = "message"
			}
			return f, nil
		}
		if line[0] == ':' {
			if d.Comment != nil {
				d.Comment(strings.TrimPrefix(line[1:], " "))
			}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			f.Event = value
		case "data":
			data.WriteString(value)
			data.WriteByte('\n')
			hasData = true
		case "id":
			if !strings.Contains(value, "\x00") {
				d.lastID = value
				f.IDSet = true
			}
		case "retry":
			if n, err := strconv.Atoi(value); err == nil && n >= 0 && isDigits(value) {
				d.Retry = n
			}
		}
	}
}

// line reads one line ended by CRLF, LF or CR, without its end. After a
// CR it remembers to drop a LF that follows, rather than waiting for the
// next byte, so a CR-ended frame is dispatched as soon as it arrives.
func (d *Decoder) line() (string, error) {
	var buf []byte
	for {
		c, err := d.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && len(buf) > 0 {
				return "", io.ErrUnexpectedEOF
			}
			return "", err
		}
		if d.skipLF {
			d.skipLF = false
			if c == '\n' {
				continue
			}
		}
		switch c {
		case '\n':
			return string(buf), nil
		case '\r':
			d.skipLF = true
			return string(buf), nil
		}
		if buf = append(buf, c); len(buf) > MaxLine {
			return "", ErrLineTooLong
		}
	}
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
