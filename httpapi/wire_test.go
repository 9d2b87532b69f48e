package httpapi

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// connPair is a taken-over stream's wire on the server's end of a
// loopback connection, and the client's end.
func connPair(t *testing.T) (*connWire, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	raw, err := server.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	cw := &connWire{conn: server, raw: raw}
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
