// Command edgeceiling is the fan-out ceiling of `edgeload bench`: a bare
// HTTP server that holds server-sent event streams and, on a publish,
// writes one pre-encoded frame to every stream of the topic. It stores
// nothing, keeps no queue, parses nothing and runs no goroutine per
// stream, so its fan-out is bounded by the machine (loopback sockets, the
// network poller, the cores) and not by a hub's design. See
// plans/017-benchmark.md.
//
//	GET  /topics/{topic}/watch    the response head and a hello frame once the stream is registered, then one frame per publish
//	POST /topics/{topic}/publish  a one-line body (at most 1 MiB), answered {"seq":N} once the frame is in every stream's socket
//
// A stream whose write fails is dropped. A stream that stops reading
// stalls the publishes of its topic: this measures a machine, it is not a
// hub.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Error("listen", "err", err)
		os.Exit(1)
	}
	s := &server{topics: map[string]*topic{}, workers: runtime.GOMAXPROCS(0)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /topics/{topic}/watch", s.watch)
	mux.HandleFunc("POST /topics/{topic}/publish", s.publish)
	srv := &http.Server{Handler: mux}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close() //nolint:errcheck // exiting; the streams are hijacked and end with the process
	}()
	log.Info("listening", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

type server struct {
	mu      sync.Mutex
	topics  map[string]*topic
	workers int // goroutines that write one publish's frame, each to its share of the streams
}

// topic is one topic's streams. mu is held for a whole publish, so frames
// reach every stream in publish order.
type topic struct {
	mu    sync.Mutex
	seq   int64
	conns []net.Conn
}

func (s *server) topic(name string) *topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.topics[name]
	if !ok {
		t = &topic{}
		s.topics[name] = t
	}
	return t
}

const head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n" +
	"event: hello\ndata: {}\n\n"

// watch takes the connection over and registers it; the body is the rest
// of the connection, with no chunked framing.
func (s *server) watch(w http.ResponseWriter, r *http.Request) {
	t := s.topic(r.PathValue("topic"))
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := io.WriteString(conn, head); err != nil {
		conn.Close() //nolint:errcheck // a stream that failed at its first write
		return
	}
	t.conns = append(t.conns, conn)
}

func (s *server) publish(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	if bytes.ContainsAny(body, "\r\n") || len(body) == 0 {
		http.Error(w, "the body must be one non-empty line", http.StatusBadRequest)
		return
	}
	t := s.topic(r.PathValue("topic"))
	t.mu.Lock()
	t.seq++
	seq := t.seq
	frame := make([]byte, 0, len(body)+32)
	frame = append(frame, "id: "...)
	frame = strconv.AppendInt(frame, seq, 10)
	frame = append(frame, "\ndata: "...)
	frame = append(frame, body...)
	frame = append(frame, "\n\n"...)
	t.conns = s.writeAll(t.conns, frame)
	t.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"seq":%d}`, seq) //nolint:errcheck // a publisher that hung up has nothing to learn
}

// writeAll writes frame to every connection, split among the workers,
// and returns the connections whose write did not fail.
func (s *server) writeAll(conns []net.Conn, frame []byte) []net.Conn {
	n := min(s.workers, (len(conns)+63)/64)
	if n <= 1 {
		return writeShare(conns, frame)
	}
	share := (len(conns) + n - 1) / n
	kept := make([][]net.Conn, n)
	var wg sync.WaitGroup
	for i := range n {
		part := conns[min(i*share, len(conns)):min((i+1)*share, len(conns))]
		wg.Go(func() { kept[i] = writeShare(part, frame) })
	}
	wg.Wait()
	out := conns[:0]
	for _, k := range kept {
		out = append(out, k...)
	}
	return out
}

// writeShare writes frame to each of conns and returns those it could
// write to, in place (conns is the caller's to reuse).
func writeShare(conns []net.Conn, frame []byte) []net.Conn {
	out := conns[:0]
	for _, c := range conns {
		if _, err := c.Write(frame); err != nil {
			c.Close() //nolint:errcheck // dropped after a failed write
			continue
		}
		out = append(out, c)
	}
	return out
}
