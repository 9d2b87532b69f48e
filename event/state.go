package event

import (
	"io"
	"strconv"
)

// WriteState writes a topic's keyed state as of sequence seq to w, as the
// state answer's body and the snapshot frame's data:
// {"seq":S,"state":{"<key>":<data>,...}}. each hands over the keys, in key
// order, by calling key for every one (data is compact JSON); an error
// from it or from w ends the writing. The state is never built whole:
// w decides where it goes (a spool, on disk for a large one).
func WriteState(w io.Writer, seq int64, each func(key func(name string, data []byte) error) error) error {
	var scratch [160]byte
	b := strconv.AppendInt(append(scratch[:0], `{"seq":`...), seq, 10)
	if _, err := w.Write(append(b, `,"state":{`...)); err != nil {
		return err
	}
	if each != nil {
		first := true
		err := each(func(name string, data []byte) error {
			b := scratch[:0]
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(AppendJSONString(b, name), ':')
			if _, err := w.Write(b); err != nil {
				return err
			}
			_, err := w.Write(data)
			return err
		})
		if err != nil {
			return err
		}
	}
	_, err := w.Write([]byte("}}"))
	return err
}
