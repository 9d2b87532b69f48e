package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// errStreamEnded is a stream the server ended.
var errStreamEnded = errors.New("the stream ended")

// watchLoop opens GET path on addr over a connection of its own and calls
// onData for each data line of the event stream, with the event name of
// its frame (empty if none). The slices are valid only during the call.
// Watchers do not share the HTTP client's pool: a stream holds its
// connection to the end, and reading the response by hand keeps one
// goroutine per stream on the benchmark's side of the same cores.
func watchLoop(ctx context.Context, addr, path string, onData func(event, data []byte) error) error {
	return watchLoopOpened(ctx, addr, path, nil, onData)
}

// watchLoopOpened is watchLoop for a hub whose stream is subscribed once
// its response head has come (Mercure's sends no frame before the first
// event): it calls opened, if set, on a 200 before the first data line.
func watchLoopOpened(ctx context.Context, addr, path string, opened func(), onData func(event, data []byte) error) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()                                      //nolint:errcheck // a stream we are done with
	stop := context.AfterFunc(ctx, func() { conn.Close() }) //nolint:errcheck // ends a stream on cancel
	defer stop()
	_, err = io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: "+addr+"\r\nAccept: text/event-stream\r\n\r\n")
	if err == nil {
		err = func() error {
			resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 2048), nil)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, bytes.TrimSpace(b))
			}
			if opened != nil {
				opened()
			}
			err = sseScan(resp.Body, onData)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return errStreamEnded
			}
			return err
		}()
	}
	switch {
	case errors.Is(err, errDone):
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return err
}

// sseScan reads an event stream from r and calls onData for each data
// line, as it arrives, with the event name of its frame.
func sseScan(r io.Reader, onData func(event, data []byte) error) error {
	br := bufio.NewReaderSize(r, 4096)
	var event, long []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			return err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		switch {
		case len(line) == 0:
			event = event[:0]
		case bytes.HasPrefix(line, []byte("data:")):
			if err := onData(event, bytes.TrimPrefix(line[len("data:"):], []byte(" "))); err != nil {
				return err
			}
		case bytes.HasPrefix(line, []byte("event:")):
			event = append(event[:0], bytes.TrimPrefix(line[len("event:"):], []byte(" "))...)
		}
	}
}

// tracker checks one watcher's deliveries against the events numbered
// 1..want by the payload's counter.
type tracker struct {
	want      int64
	strictPos bool // the hub's position must equal the counter (Edgehub's seq)
	seen      []uint64
	max       int64
	got       int64 // distinct events of 1..want
	dup       int64 // an event seen before
	ooo       int64 // an event after one with a larger counter
	unknown   int64 // a counter outside 1..want, or no payload at all
	wrongPos  int64 // strictPos and the position differs from the counter
}

func newTracker(want int64, strictPos bool) *tracker {
	return &tracker{want: want, strictPos: strictPos, seen: make([]uint64, (want+63)/64)}
}

func (t *tracker) add(d Delivery) {
	n := d.N
	if n < 1 || n > t.want {
		t.unknown++
		return
	}
	w, bit := (n-1)/64, uint64(1)<<((n-1)%64)
	if t.seen[w]&bit != 0 {
		t.dup++
		return
	}
	t.seen[w] |= bit
	atomic.AddInt64(&t.got, 1) // progress reads it while the stream runs
	if n < t.max {
		t.ooo++
	} else {
		t.max = n
	}
	if t.strictPos && d.Pos != n {
		t.wrongPos++
	}
}

// violations are what went wrong in one measurement, by kind; none is a
// clean run.
type violations map[string]int64

func (v violations) addTracker(t *tracker) {
	v.add("missing", t.want-t.got)
	v.add("duplicate", t.dup)
	v.add("out_of_order", t.ooo)
	v.add("unexpected", t.unknown)
	v.add("wrong_seq", t.wrongPos)
}

func (v violations) add(kind string, n int64) {
	if n != 0 {
		v[kind] += n
	}
}

func (v violations) total() int64 {
	var s int64
	for _, n := range v {
		s += n
	}
	return s
}

// checkPositions holds the positions a hub answered n publishes with to
// 1..n, each once (and, if ordered, rising). A hub that answers none
// (all 0) is not checked.
func checkPositions(v violations, pos []int64, n int64, ordered bool) {
	t := newTracker(n, false)
	answered := false
	for _, p := range pos {
		if p != 0 {
			answered = true
			break
		}
	}
	if !answered {
		return
	}
	for _, p := range pos {
		t.add(Delivery{N: p})
	}
	v.add("answer_missing", t.want-t.got)
	v.add("answer_duplicate", t.dup)
	v.add("answer_unexpected", t.unknown)
	if ordered {
		v.add("answer_out_of_order", t.ooo)
	}
}
