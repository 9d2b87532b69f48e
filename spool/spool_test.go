package spool

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A small answer stays in memory; a large one goes to a file that no
// directory lists, keeps one piece in memory, and reads back whole and
// in order; what it keeps is admitted before it is kept, and closing it
// leaves nothing behind.
func TestSpoolKeepsLargeAnswersOnDisk(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 10, PieceBytes, PieceBytes + 1, 5*PieceBytes + 123} {
		var inMemory, onDisk int64
		s := New(dir, func(n int64) error { inMemory += n; return nil }, func(n int64) error { onDisk += n; return nil })
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(i * 7)
		}
		// Written in uneven parts, as an answer is built.
		for rest := want; len(rest) > 0; {
			k := min(len(rest), 1+len(rest)%3001)
			if _, err := s.Write(rest[:k]); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := s.Done(); err != nil {
			t.Fatal(err)
		}
		if s.Len() != int64(size) {
			t.Fatalf("size %d: Len %d", size, s.Len())
		}
		if cap(s.buf) > PieceBytes {
			t.Fatalf("size %d: %d bytes in memory", size, cap(s.buf))
		}
		if onDisk := s.file != nil; onDisk != (size > PieceBytes) {
			t.Fatalf("size %d: on disk %v", size, onDisk)
		}
		if inMemory != int64(cap(s.buf)) || onDisk < s.filed || onDisk > s.filed+admitStep {
			t.Fatalf("size %d: admitted %d in memory and %d on disk for %d and %d kept", size, inMemory, onDisk, cap(s.buf), s.filed)
		}
		var got bytes.Buffer
		if err := s.Pieces(func(p []byte) error {
			if len(p) > PieceBytes {
				t.Fatalf("a piece of %d bytes", len(p))
			}
			got.Write(p)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("size %d: read back %d bytes, not the answer", size, got.Len())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
		t.Fatalf("files left behind: %v", left)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Fatalf("files left behind: %v", entries)
	}
}

// A refusal from admit fails the write before the bytes are kept.
func TestSpoolRefusalStopsTheWrite(t *testing.T) {
	refused := errors.New("no room")
	var admitted int64
	s := New(t.TempDir(), func(int64) error { return nil }, func(n int64) error {
		if admitted+n > 2*PieceBytes {
			return refused
		}
		admitted += n
		return nil
	})
	defer s.Close()
	chunk := make([]byte, 1000)
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = s.Write(chunk)
	}
	if !errors.Is(err, refused) {
		t.Fatalf("writes past what admit allows: %v", err)
	}
	if s.filed > admitted {
		t.Fatalf("keeps %d bytes on disk, %d admitted", s.filed, admitted)
	}
}
