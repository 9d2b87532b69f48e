// Package spool holds a read answer between the moment it is built and
// the moment its client has read it: in memory while it is small, in an
// unlinked temporary file once it is not. A client that reads slowly, or
// never, then holds a file's bytes on disk, not the server's memory, and
// every byte a spool keeps is admitted first, in memory from the read
// budget and on disk from the spool budget, so that many such clients
// together are bounded too.
package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// PieceBytes is the most a spool keeps in memory: the answer while it is
// no larger, and otherwise the piece being written to its file or read
// back from it.
const PieceBytes = 64 << 10

// Spool is one answer: written whole first (Write, then Done), then
// read back in pieces (Pieces), then closed. It is used by one goroutine
// at a time.
type Spool struct {
	dir          string
	memory, disk func(n int64) error
	buf          []byte   // the answer, or the part of it not yet in file
	file         *os.File // nil while the answer fits in buf
	filed        int64    // bytes in file
	// memAdmitted and diskAdmitted are what memory and disk have
	// granted: at least cap(buf) and filed.
	memAdmitted, diskAdmitted int64
}

// admitStep is the least a spool asks for on disk at a time, so that an
// answer built from many small writes asks seldom.
const admitStep = PieceBytes

// New starts an empty spool whose file, if it needs one, is made in dir
// (the system's temporary directory if empty). memory and disk are given
// each growth of what the spool keeps in memory and on disk before it is
// kept, and an error from either fails the Write, Expect or Done.
func New(dir string, memory, disk func(n int64) error) *Spool {
	return &Spool{dir: dir, memory: memory, disk: disk}
}

// Memory is the bytes the spool keeps in memory: what its memory has
// granted, at least.
func (s *Spool) Memory() int64 { return int64(cap(s.buf)) }

// Len is the answer's size.
func (s *Spool) Len() int64 { return s.filed + int64(len(s.buf)) }

// Expect says that the answer will be about n bytes: an answer larger
// than a piece asks for its disk bytes at once, before any is written,
// so that it is refused before it is built and asks only once.
func (s *Spool) Expect(n int64) error {
	if n <= PieceBytes {
		return nil
	}
	return s.reserveDisk(n)
}

// reserveDisk has disk grant enough that the file may hold keep bytes.
func (s *Spool) reserveDisk(keep int64) error {
	if keep <= s.diskAdmitted {
		return nil
	}
	grow := max(keep-s.diskAdmitted, admitStep)
	if err := s.disk(grow); err != nil {
		return err
	}
	s.diskAdmitted += grow
	return nil
}

// Write appends p to the answer.
func (s *Spool) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(s.buf) == PieceBytes {
			if err := s.spill(); err != nil {
				return n - len(p), err
			}
		}
		if len(s.buf) == cap(s.buf) {
			c := min(max(2*cap(s.buf), 4<<10, len(s.buf)+len(p)), PieceBytes)
			if err := s.memory(int64(c - cap(s.buf))); err != nil {
				return n - len(p), err
			}
			s.memAdmitted += int64(c - cap(s.buf))
			s.buf = append(make([]byte, 0, c), s.buf...)
		}
		k := copy(s.buf[len(s.buf):cap(s.buf)], p)
		s.buf = s.buf[:len(s.buf)+k]
		p = p[k:]
	}
	return n, nil
}

// spill moves what is in memory to the file, making the file on the
// first spill; the memory is kept for the next piece.
func (s *Spool) spill() error {
	if err := s.reserveDisk(s.filed + int64(len(s.buf))); err != nil {
		return err
	}
	if s.file == nil {
		f, err := os.CreateTemp(s.dir, ".edgehub-answer-")
		if err != nil {
			return fmt.Errorf("spool an answer to disk: %w", err)
		}
		// Unlinked at once: the file lives as long as the descriptor, and
		// nothing is left behind by a crash.
		if err := os.Remove(f.Name()); err != nil {
			return errors.Join(fmt.Errorf("spool an answer to disk: %w", err), f.Close())
		}
		s.file = f
	}
	if _, err := s.file.Write(s.buf); err != nil {
		return fmt.Errorf("spool an answer to disk: %w", err)
	}
	s.filed += int64(len(s.buf))
	s.buf = s.buf[:0]
	return nil
}

// Done ends the writing: an answer that went to disk goes there whole,
// so that Pieces reads it back through the memory it keeps.
func (s *Spool) Done() error {
	if s.file == nil || len(s.buf) == 0 {
		return nil
	}
	return s.spill()
}

// Pieces hands the answer to fn in order, in pieces of at most
// PieceBytes; fn must not keep a piece after it returns. It stops at
// fn's first error and returns it. Done must have been called.
func (s *Spool) Pieces(fn func(piece []byte) error) error {
	if s.file == nil {
		if len(s.buf) == 0 {
			return nil
		}
		return fn(s.buf)
	}
	piece := s.buf[:cap(s.buf)]
	for off := int64(0); off < s.filed; {
		n, err := s.file.ReadAt(piece[:min(int64(len(piece)), s.filed-off)], off)
		if n > 0 {
			if ferr := fn(piece[:n]); ferr != nil {
				return ferr
			}
			off += int64(n)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read a spooled answer back: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("read a spooled answer back: %d of %d bytes", off, s.filed)
		}
	}
	return nil
}

// Close gives up the answer and its file. What was admitted is the
// caller's to give back.
func (s *Spool) Close() error {
	s.buf = nil
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file = nil
	if err != nil {
		return fmt.Errorf("close a spooled answer: %w", err)
	}
	return nil
}
