package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// connPair is a taken-over stream's wire on the server's end of a
// loopback connection, and the client's end.
func connPair(t *testing.T) (*connWire, net.Conn) {
	t.Helper()
	return pairOf(t, &net.Dialer{}, 0)
}

// pairOf is connPair with the client dialled by d and, unless sendBuf is
// 0, the server's send buffer set to sendBuf bytes.
func pairOf(t *testing.T, d *net.Dialer, sendBuf int) (*connWire, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	if sendBuf > 0 {
		server.(*net.TCPConn).SetWriteBuffer(sendBuf)
	}
	raw, err := server.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	cw := &connWire{conn: server, raw: raw, endBy: new(atomic.Int64)}
	cw.readable = cw.onReadable
	return cw, client
}

// hangGuard is how long a wait may take before the test calls it missed;
// a guard against hanging, not a timing assertion.
const hangGuard = 10 * time.Second

type waited struct {
	ping bool
	err  error
}

// waitOn runs cw.wait on its own goroutine and returns what it returned,
// or fails when it has not returned by the hang guard.
func waitOn(t *testing.T, cw *connWire, ctx context.Context, ready chan struct{}, pingAt time.Time) waited {
	t.Helper()
	done := make(chan waited, 1)
	go func() {
		ping, err := cw.wait(ctx, ready, pingAt)
		done <- waited{ping, err}
	}()
	select {
	case w := <-done:
		return w
	case <-time.After(hangGuard):
		cw.conn.Close() // ends the wait
		t.Fatal("the wait did not return: a wake or the client's leaving was missed")
		return waited{}
	}
}

// The hub signals ready and wakes the stream at the worst moment: after
// its wait looked at ready and found nothing, before it waits on the
// connection. The wait must still return for the signal, not sleep until
// the next heartbeat (an hour here).
func TestWakeBetweenTheLookAndTheWaitIsNotMissed(t *testing.T) {
	cw, _ := connPair(t)
	ready := make(chan struct{}, 1)
	cw.parking = func() {
		cw.parking = nil
		ready <- struct{}{} // what stream.signal does, then its wake
		cw.wake()
	}
	w := waitOn(t, cw, context.Background(), ready, time.Now().Add(time.Hour))
	if w.ping || w.err != nil {
		t.Fatalf("wait gave ping %v, %v; want the signal", w.ping, w.err)
	}
	if len(ready) != 0 {
		t.Fatal("wait returned without taking the signal")
	}
}

// A wait returns for the heartbeat when its time comes, for the client's
// leaving or its byte, and for the end of its context woken by ending.
func TestWaitReturnsForEachReason(t *testing.T) {
	never := time.Now().Add(time.Hour)
	t.Run("heartbeat", func(t *testing.T) {
		cw, _ := connPair(t)
		w := waitOn(t, cw, context.Background(), make(chan struct{}, 1), time.Now().Add(20*time.Millisecond))
		if !w.ping || w.err != nil {
			t.Fatalf("wait gave ping %v, %v; want a ping", w.ping, w.err)
		}
	})
	t.Run("client closes", func(t *testing.T) {
		cw, client := connPair(t)
		cw.parking = func() { client.Close() }
		if w := waitOn(t, cw, context.Background(), make(chan struct{}, 1), never); !errors.Is(w.err, errLeft) {
			t.Fatalf("wait gave %v; want errLeft", w.err)
		}
	})
	t.Run("client sends a byte", func(t *testing.T) {
		cw, client := connPair(t)
		cw.parking = func() { client.Write([]byte("x")) }
		if w := waitOn(t, cw, context.Background(), make(chan struct{}, 1), never); !errors.Is(w.err, errLeft) {
			t.Fatalf("wait gave %v; want errLeft", w.err)
		}
	})
	t.Run("server ending", func(t *testing.T) {
		cw, _ := connPair(t)
		ctx, cancel := context.WithCancel(context.Background())
		cw.parking = func() {
			cw.parking = nil
			cancel() // EndStreams ends the contexts, then wakes each stream
			cw.ending(time.Now().Add(endGrace))
		}
		if w := waitOn(t, cw, ctx, make(chan struct{}, 1), never); !errors.Is(w.err, context.Canceled) {
			t.Fatalf("wait gave %v; want context.Canceled", w.err)
		}
	})
}

// bigWrite writes a chunk far larger than the sockets' buffers to a
// client that does not read, so that it stops partway at its deadline,
// and returns what write returned, or fails at the hang guard.
func bigWrite(t *testing.T, cw *connWire, deadline func() time.Time) error {
	t.Helper()
	chunk := bytes.Repeat([]byte("x"), 64<<20)
	done := make(chan error, 1)
	go func() { done <- cw.write(deadline(), chunk) }()
	select {
	case err := <-done:
		return err
	case <-time.After(hangGuard):
		cw.conn.Close()
		t.Fatal("the write went on past its deadline")
		return nil
	}
}

// A write cut by its deadline leaves half a chunk on the wire. The end of
// the stream must then send nothing more: a last chunk there would land
// inside the cut one, and the client would take the half frame before it
// for a whole one.
func TestAfterACutWriteTheStreamEndsWithoutALastChunk(t *testing.T) {
	cw, client := connPair(t)
	cw.head = []byte("HTTP/1.1 200 OK\r\n\r\n")
	if err := bigWrite(t, cw, func() time.Time { return time.Now().Add(50 * time.Millisecond) }); err == nil {
		t.Fatal("a 64 MiB write to a client that does not read finished")
	}
	cw.end()
	got, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200 OK\r\n\r\n4000000\r\nxxx")) {
		t.Fatalf("the cut write sent %d bytes, not the head and a part of its chunk", len(got))
	}
	if bytes.HasSuffix(got, lastChunk) {
		t.Fatalf("the stream ended with the last chunk after %d bytes of a cut one", len(got))
	}
}

// A clean end sends the head if nothing was written, then the last chunk.
func TestACleanEndSendsTheLastChunk(t *testing.T) {
	cw, client := connPair(t)
	cw.head = []byte("HTTP/1.1 200 OK\r\n\r\n")
	cw.end()
	got, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if want := "HTTP/1.1 200 OK\r\n\r\n0\r\n\r\n"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A write that set its deadline just before a shutdown (an hour, here)
// still ends by the server's end: setWriteDeadline looks at it after it
// sets its own.
func TestAWriteEndsByTheServersEnd(t *testing.T) {
	cw, _ := connPair(t)
	hour := func() time.Time {
		cw.endBy.Store(time.Now().Add(50 * time.Millisecond).UnixNano())
		return time.Now().Add(time.Hour)
	}
	if err := bigWrite(t, cw, hour); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the write gave %v; want its deadline exceeded", err)
	}
}
