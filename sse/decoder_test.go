package sse

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// The decoder follows the WHATWG rules: any line end, comments, multi-line
// data, the last id carried forward, and an unfinished frame dropped.
func TestDecoderFollowsTheSpec(t *testing.T) {
	in := ": comment\r\nid: 1\revent: a\ndata: x\ndata:  y\n\n" +
		"data: z\r\n\r\n" +
		"id\nretry: 5x\ndata\n\n" +
		"data: unfinished"
	d := NewDecoder(strings.NewReader(in))
	want := []Frame{
		{ID: "1", IDSet: true, Event: "a", Data: "x\n y"},
		{ID: "1", Event: "message", Data: "z"},
		{ID: "", IDSet: true, Event: "message", Data: ""},
	}
	for i, w := range want {
		f, err := d.Next()
		if err != nil || f != w {
			t.Fatalf("frame %d: got %+v %v, want %+v", i, f, err, w)
		}
	}
	if _, err := d.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("unfinished frame: %v", err)
	}
	if d.Retry != 0 {
		t.Fatalf("retry with a non-digit was taken: %d", d.Retry)
	}
}
