package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// wire is where a stream's bytes go. Each write is whole frames, written
// and flushed under the deadline given, so a client that stops reading
// holds its stream for no longer than that.
type wire interface {
	// write sends parts, in order, as one piece of the body.
	write(deadline time.Time, parts ...[]byte) error
	// wait blocks until ready is signalled (and takes the signal), pingAt
	// comes (ping is true), or the stream is over: ctx ended or the
	// client left.
	wait(ctx context.Context, ready <-chan struct{}, pingAt time.Time) (ping bool, err error)
	// ending shortens the deadline of a write in progress and wakes a
	// wait, for a shutdown; the stream's ctx has ended already.
	ending(deadline time.Time)
	// end ends the body cleanly after the last whole frame and lets the
	// connection go.
	end()
}

// errLeft is a stream's end when its client closed the connection or sent
// more than its request.
var errLeft = errors.New("the client left")

// responseWire writes through net/http's response: HTTP/2, TLS, and any
// request whose connection is not taken over (takeOver).
type responseWire struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	timer *time.Timer
	endBy *atomic.Int64 // the server's (Server.endBy)
}

func (s *Server) newResponseWire(w http.ResponseWriter) *responseWire {
	w.WriteHeader(http.StatusOK)
	return &responseWire{w: w, rc: http.NewResponseController(w), timer: time.NewTimer(time.Hour), endBy: &s.endBy}
}

func (rw *responseWire) write(deadline time.Time, parts ...[]byte) error {
	if err := setWriteDeadline(rw.rc, rw.endBy, deadline); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := rw.w.Write(p); err != nil {
			return fmt.Errorf("write frames: %w", err)
		}
	}
	if err := rw.rc.Flush(); err != nil {
		return fmt.Errorf("flush frames: %w", err)
	}
	return nil
}

// wait's ctx also ends when net/http sees the client leave.
func (rw *responseWire) wait(ctx context.Context, ready <-chan struct{}, pingAt time.Time) (bool, error) {
	rw.timer.Reset(time.Until(pingAt))
	select {
	case <-ready:
		return false, nil
	case <-rw.timer.C:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (rw *responseWire) ending(deadline time.Time) {
	rw.rc.SetWriteDeadline(deadline) //nolint:errcheck // the stream ends either way
}

// end stops the timer; the handler's return then has net/http end the
// body.
func (rw *responseWire) end() { rw.timer.Stop() }

// connWire writes a stream on a connection taken over from net/http. A
// stream sits idle for most of its life, and net/http keeps, for each of
// its connections, a read and a write buffer, the handler's goroutine
// with the stack that serving the request grew, and a second goroutine
// that watches for the client leaving. A taken-over stream keeps the
// connection and one goroutine, started after the hello with a small
// stack, which waits on the connection itself: for the client to leave
// (it becomes readable), for the next heartbeat (its read deadline), or
// to be woken (by moving that deadline into the past). A wait costs one
// read that finds nothing, instead of a second goroutine. While the
// stream is live, its pushes are written by a writer of the server's
// pool (fanout.go), not by that goroutine: it is woken only to take the
// stream back, or for its catch-up, while it is not.
//
// The body is chunked, as net/http would send it, so that a clean end
// (the last chunk) can be told from a cut connection; the answer says
// Connection: close because the connection is not net/http's to reuse.
type connWire struct {
	conn net.Conn
	raw  syscall.RawConn
	// head is the status line and headers, sent with the first write.
	head []byte
	// readable is raw.Read's callback, made once; one and left are its
	// state, used only on the stream's goroutine.
	readable func(fd uintptr) bool
	one      [1]byte
	left     bool
	// broken is set by a failed write: the body cannot end cleanly.
	broken bool
	// rest is what a pool write left of its chunk, and failed its error,
	// for the stream's own goroutine (sseStream.finish).
	rest   net.Buffers
	failed error
	// endBy is the server's (Server.endBy).
	endBy *atomic.Int64
	// parking, if set (by a test), runs after wait has found ready empty,
	// or pooled the stream still in the pool, and before it waits on the
	// connection: the window a wake must not miss.
	parking func()
}

// takeOver takes the connection of r from net/http, if r is plain
// HTTP/1.1 over TCP with no body and its response has not begun, and
// returns the wire that writes the stream there, with the headers set on
// w; ok is false when the stream stays on net/http's response. An SSE
// client sends nothing after its request, and a connection that the
// server will close has no next request to read, so any byte the client
// sends ends the stream, as its leaving does.
func (s *Server) takeOver(w http.ResponseWriter, r *http.Request) (*connWire, bool) {
	if s.faults.answeredEarly() || r.TLS != nil || r.ProtoMajor != 1 || r.ProtoMinor < 1 || r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return nil, false
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, false
	}
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\n")
	h := w.Header()
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Transfer-Encoding", "chunked")
	h.Set("Connection", "close")
	if err := h.Write(&head); err != nil {
		return nil, false
	}
	head.WriteString("\r\n")
	conn, brw, err := hj.Hijack()
	if err != nil {
		return nil, false
	}
	sc, ok := conn.(syscall.Conn)
	var raw syscall.RawConn
	if ok {
		raw, err = sc.SyscallConn()
	}
	if !ok || err != nil {
		// Not a connection of the standard server's: it cannot be waited
		// on, so it is not served.
		conn.Close() //nolint:errcheck // the stream's first write fails and ends it
		return &connWire{conn: conn, left: true, broken: true, endBy: &s.endBy}, true
	}
	// Only the connection is kept: the reader net/http hands back holds its
	// connection's buffers and, through it, the whole request.
	cw := &connWire{conn: conn, raw: raw, head: head.Bytes(), left: brw.Reader.Buffered() > 0, endBy: &s.endBy}
	cw.readable = cw.onReadable
	return cw, true
}

// wake makes a wait return to look at ready; the hub calls it
// (Subscription.OnReady).
func (cw *connWire) wake() {
	cw.conn.SetReadDeadline(aLongTimeAgo) //nolint:errcheck // a closed connection has no wait to wake
}

var aLongTimeAgo = time.Unix(1, 0)

// wait sets the read deadline before it looks at ready and ctx, so that a
// wake (or an ending) after the look moves the deadline back into the
// past and the read returns at once: no signal is missed.
func (cw *connWire) wait(ctx context.Context, ready <-chan struct{}, pingAt time.Time) (bool, error) {
	for !cw.left {
		if err := cw.conn.SetReadDeadline(pingAt); err != nil {
			return false, fmt.Errorf("set read deadline: %w", err)
		}
		select {
		case <-ready:
			return false, nil
		default:
		}
		if cw.parking != nil {
			cw.parking()
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if !time.Now().Before(pingAt) {
			return true, nil
		}
		err := cw.raw.Read(cw.readable)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return false, fmt.Errorf("wait on the connection: %w", err)
		}
	}
	return false, errLeft
}

// onReadable is raw.Read's callback. It reads one byte, which tells a
// connection with nothing to read (wait on, for readability or the read
// deadline) from a client that is done: a byte, the end of the stream or
// an error. It must try the read every time, the first included: raw.Read
// forgets, before its first call, any readiness the poller saw earlier.
func (cw *connWire) onReadable(fd uintptr) bool {
	for {
		_, err := syscall.Read(int(fd), cw.one[:])
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return false
		}
		cw.left = true
		return true
	}
}

// write is the stream's own goroutine's: the hello, a catch-up, a
// heartbeat. Its pieces are made for each write (a parked stream keeps
// none), and it writes them with writev itself: the standard library's
// keeps its array of pieces with the connection for life.
// consume reads, for a stream the parker saw its client leave, what made
// it readable, as wait's read does: a byte left unread would make the
// close a reset, and the client would lose the body's clean end.
func (cw *connWire) consume() {
	cw.raw.Control(func(fd uintptr) { cw.onReadable(fd) }) //nolint:errcheck // a closed connection has nothing to read
}

func (cw *connWire) write(deadline time.Time, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n == 0 && cw.head == nil {
		return nil
	}
	bufs := make([][]byte, 0, len(parts)+3)
	bufs = append(bufs, cw.head)
	if n > 0 {
		bufs = append(bufs, append(strconv.AppendInt(make([]byte, 0, 20), int64(n), 16), '\r', '\n'))
		bufs = append(bufs, parts...)
		bufs = append(bufs, crlf)
	}
	cw.head = nil
	if err := setWriteDeadline(cw.conn, cw.endBy, deadline); err != nil {
		cw.broken = true
		return err
	}
	if err := cw.writev(bufs); err != nil {
		cw.broken = true // a part of a chunk may have gone out
		return fmt.Errorf("write frames: %w", err)
	}
	return nil
}

// writev writes bufs whole, waiting for room in the socket until the
// write deadline.
func (cw *connWire) writev(bufs [][]byte) error {
	if cw.raw == nil {
		return net.ErrClosed // a connection that is not served (takeOver)
	}
	iov := make([]syscall.Iovec, 0, len(bufs))
	var werr error
	err := cw.raw.Write(func(fd uintptr) bool {
		for {
			iov = iov[:0]
			for _, b := range bufs {
				if len(b) > 0 {
					iov = appendIovec(iov, b)
				}
			}
			if len(iov) == 0 {
				return true
			}
			n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
			switch e {
			case 0:
				bufs = consumed(bufs, int(n))
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait for room, or the deadline
			default:
				werr = e
				return true
			}
		}
	})
	clear(iov) // hold no frame past its write
	if err != nil {
		return err
	}
	return werr
}

// consumed is what is left of bufs once written bytes of it went out.
func consumed(bufs [][]byte, written int) [][]byte {
	for len(bufs) > 0 && written >= len(bufs[0]) {
		written -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 {
		bufs[0] = bufs[0][written:]
	}
	return bufs
}

var (
	crlf      = []byte("\r\n")
	lastChunk = []byte("0\r\n\r\n")
)

// ending follows EndStreams' store of the end in endBy (setWriteDeadline).
func (cw *connWire) ending(deadline time.Time) {
	cw.conn.SetWriteDeadline(deadline) //nolint:errcheck // the stream ends either way
	cw.wake()
}

// setWriteDeadline sets deadline on conn, or the server's end (endBy, in
// Unix nanoseconds; 0 until EndStreams) if that comes first. It looks at
// endBy after it sets the deadline, and EndStreams stores endBy before it
// shortens each stream's deadline, so a write that computed its deadline
// just before a shutdown cannot put back a longer one.
func setWriteDeadline(conn interface{ SetWriteDeadline(time.Time) error }, endBy *atomic.Int64, deadline time.Time) error {
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("set write deadline: %w", err)
	}
	if e := endBy.Load(); e != 0 && e < deadline.UnixNano() {
		if err := conn.SetWriteDeadline(time.Unix(0, e)); err != nil {
			return fmt.Errorf("set write deadline: %w", err)
		}
	}
	return nil
}

// end sends the last chunk, so the client sees a clean end of the body
// (after the head, if the stream never wrote), and closes the connection.
// After a failed write it sends nothing: the last chunk would land inside
// the chunk that was cut, and the client would take the frame's first
// half for a whole one.
func (cw *connWire) end() {
	if !cw.broken && setWriteDeadline(cw.conn, cw.endBy, time.Now().Add(endGrace)) == nil {
		cw.writev([][]byte{cw.head, lastChunk}) //nolint:errcheck // the client may be gone; the close follows
	}
	cw.conn.Close() //nolint:errcheck // nothing more is sent either way
}
