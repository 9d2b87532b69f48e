// Command edgeceiling is the ceiling of `edgeload bench`: a bare HTTP
// server that holds server-sent event streams and, on a publish, makes
// the frame durable the cheapest way this machine has (an overwrite in a
// file written in full beforehand, then fdatasync, so the file's size
// and blocks never change; concurrent publishes share one fdatasync) and
// writes it to every stream of the topic.
// It keeps no index, no queue, parses nothing and runs no goroutine per
// stream, so its one-publisher rate is what a durable hub can reach on
// this disk at all, its 16-publisher rate what group commit over HTTP
// can, and its fan-out what the machine (loopback sockets,
// the network poller, the cores) allows, not a hub's design. See
// plans/017-benchmark.md.
//
//	GET  /topics/{topic}/watch    the response head and a hello frame once the stream is registered, then one frame per publish
//	POST /topics/{topic}/publish  a one-line body (at most 1 MiB), answered {"seq":N} once the frame is durable and in every stream's socket
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
	data := flag.String("data", ".", "directory of the log file")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	wal, err := newLog(*data)
	if err != nil {
		log.Error("log file", "err", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		wal.remove()
		log.Error("listen", "err", err)
		os.Exit(1)
	}
	s := &server{topics: map[string]*topic{}, workers: runtime.GOMAXPROCS(0), log: wal}
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
	err = srv.Serve(ln)
	wal.remove()
	if err != nil && err != http.ErrServerClosed {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

type server struct {
	mu      sync.Mutex
	topics  map[string]*topic
	workers int // goroutines that write one publish's frame, each to its share of the streams
	log     *wal
}

// wal is the file that publishes are made durable in: written in full
// when it is made, then overwritten in a ring, so that an fdatasync has
// only the data to flush. Concurrent publishes share fdatasyncs (group
// commit): a publish writes its frame, then waits until a sync that began
// after its write has ended, and the first waiter with none running runs
// one for every frame written so far.
type wal struct {
	mu      sync.Mutex
	synced  *sync.Cond // broadcast when a sync ends
	f       *os.File
	off     int64
	written uint64 // frames written
	durable uint64 // frames written before the last sync that ended began
	syncing bool
	err     error // of the last sync, which fails every frame it covered
}

const walBytes = 64 << 20

func newLog(dir string) (*wal, error) {
	f, err := os.CreateTemp(dir, "edgeceiling-*.log")
	if err != nil {
		return nil, err
	}
	l := &wal{f: f}
	l.synced = sync.NewCond(&l.mu)
	zeros := make([]byte, 1<<20)
	for range walBytes / len(zeros) {
		if _, err := f.Write(zeros); err != nil {
			l.remove()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		l.remove()
		return nil, err
	}
	return l, nil
}

// remove closes and deletes the file: it is 64 MiB of nothing worth
// keeping.
func (l *wal) remove() {
	l.f.Close()           //nolint:errcheck // it is removed next
	os.Remove(l.f.Name()) //nolint:errcheck // a leftover in --data is all a failure leaves
}

// write puts frame in the file and returns its ticket for wait. A frame
// longer than the file is not kept.
func (l *wal) write(frame []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(int64(len(frame)), walBytes)
	if l.off+n > walBytes {
		l.off = 0
	}
	if _, err := l.f.WriteAt(frame[:n], l.off); err != nil {
		return 0, err
	}
	l.off += n
	l.written++
	return l.written, nil
}

// wait returns once the frame of ticket is durable.
func (l *wal) wait(ticket uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.durable < ticket {
		if l.syncing {
			l.synced.Wait()
			continue
		}
		l.syncing = true
		covers := l.written
		l.mu.Unlock()
		err := syscall.Fdatasync(int(l.f.Fd()))
		l.mu.Lock()
		l.syncing, l.durable, l.err = false, covers, err
		l.synced.Broadcast()
	}
	return l.err
}

// topic is one topic's streams. Frames reach them in publish order:
// mu numbers a publish and writes it to the file in that order, and a
// publish whose frame is durable waits (sent) until every lower number
// was written to the streams, or failed.
type topic struct {
	mu    sync.Mutex
	sent  *sync.Cond // broadcast when delivered grows
	seq   int64
	conns []net.Conn
	// delivered is the highest number written to the streams or given up.
	delivered int64
}

func (s *server) topic(name string) *topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.topics[name]
	if !ok {
		t = &topic{}
		t.sent = sync.NewCond(&t.mu)
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
	seq := t.seq + 1
	frame := make([]byte, 0, len(body)+32)
	frame = append(frame, "id: "...)
	frame = strconv.AppendInt(frame, seq, 10)
	frame = append(frame, "\ndata: "...)
	frame = append(frame, body...)
	frame = append(frame, "\n\n"...)
	ticket, err := s.log.write(frame)
	if err != nil {
		t.mu.Unlock()
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	t.seq = seq
	t.mu.Unlock()
	err = s.log.wait(ticket)
	t.mu.Lock()
	for t.delivered != seq-1 {
		t.sent.Wait()
	}
	if err == nil {
		t.conns = s.writeAll(t.conns, frame)
	}
	t.delivered = seq
	t.sent.Broadcast()
	t.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
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
