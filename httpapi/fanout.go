package httpapi

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/edgehub/edgehub/sse"
)

// fanout is the server's pool of writers for the live streams it has
// taken over from net/http (plans/032-fanout-writers.md), and its parker
// (plans/055-parked-streams.md). A push to such a stream does not wake a
// goroutine of the stream's own: while the stream is live and has
// nothing to write it has none, it is parked. The hub's signal puts the
// stream on its writer's run queue, and the writer takes the stream's
// events, as the hub framed them for every stream, and writes them with
// one writev that never waits. A stream whose socket does not take the
// whole chunk, or that needs what only a goroutine that may block can do
// (catching up, waiting for read budget, ending), is handed to a new
// goroutine of its own, which parks it again once it is live with
// nothing to write. The parker notices a parked stream's client leaving
// and its heartbeats falling due. So a few goroutines write every live
// stream in turn, nothing a client does holds one of them, and an idle
// stream holds none.
type fanout struct {
	writers []*writer
	next    atomic.Uint32 // round robin over writers
	// heartbeat is the server's, for the parker.
	heartbeat time.Duration
	// start starts the writers' and the parker's goroutines with the
	// first stream; parker is nil if it could not be made, and streams
	// then keep the goroutine they were served by.
	start  sync.Once
	parker *parker
}

func newFanout(heartbeat time.Duration) *fanout {
	return &fanout{writers: make([]*writer, max(2, runtime.GOMAXPROCS(0))), heartbeat: heartbeat}
}

// writer is the writer of a new stream: each stream has one for life, so
// that no two writers ever write one stream. It is nil if the pool
// cannot park streams.
func (f *fanout) writer() *writer {
	f.start.Do(func() {
		p, err := newParker(f.heartbeat)
		if err != nil {
			return
		}
		f.parker = p
		for i := range f.writers {
			f.writers[i] = newWriter(p)
			go f.writers[i].loop()
		}
		go p.loop()
	})
	if f.parker == nil {
		return nil
	}
	return f.writers[f.next.Add(1)%uint32(len(f.writers))]
}

// stop ends the writers' and the parker's goroutines, once no stream is
// left (EndStreams).
func (f *fanout) stop() {
	f.start.Do(func() {}) // none start after
	if f.parker == nil {
		return
	}
	for _, w := range f.writers {
		close(w.quit)
	}
	f.parker.stop()
}

// Who writes a taken-over stream (sseStream.state). A goroutine of its
// own runs it exactly while it is byOwn. That goroutine parks it (byOwn
// to inPool, and the goroutine returns); the hub's signal moves it from
// inPool to queued (schedule); its writer runs it, from queued to
// running, and back to inPool, to queued if it was signalled while
// running (runAgain), or to byOwn, on a new goroutine (handBack).
// Whoever takes a parked stream back (takeBack: its client left, the
// server ends) starts that goroutine, or, if its writer is running it,
// marks it reclaiming and the writer does when the run ends.
const (
	// byOwn: its own goroutine writes it: the hello, catching up, a
	// heartbeat, what a pool write left, what must wait, the end.
	byOwn int32 = iota
	// inPool: parked: live, nothing to write, no goroutine; its writer
	// writes the next push or heartbeat.
	inPool
	// queued: on its writer's run queue.
	queued
	// running: its writer is writing it.
	running
	// runAgain: running, and signalled since: it is queued again after.
	runAgain
	// reclaiming: running, and taken back: its writer hands it to a
	// goroutine of its own when the run ends.
	reclaiming
)

// maxParts is the most frames one pool write takes: with the chunk's
// header and end, the kernel's limit on one writev's pieces (UIO_MAXIOV).
const maxParts = 1024 - 2

// writer writes its streams' live pushes, one stream at a time, from its
// run queue. It owns a stream only while it runs it, and never waits on
// one: a write the socket does not take whole hands the stream back.
type writer struct {
	mu    sync.Mutex
	queue []*sseStream // streams to run, in the order they were signalled
	ready chan struct{}
	quit  chan struct{}
	// parker watches the streams parked in the pool.
	parker *parker

	// The fields below are the writer goroutine's: one write's frames and
	// its pieces for writev, with the callback and its result, made once
	// so that a write allocates nothing.
	spare    []*sseStream
	parts    [][]byte
	chunkHdr [20]byte
	iov      []syscall.Iovec
	n        int
	errno    syscall.Errno
	writev   func(fd uintptr) bool
}

func newWriter(p *parker) *writer {
	w := &writer{ready: make(chan struct{}, 1), quit: make(chan struct{}), parker: p,
		parts: make([][]byte, 0, maxParts), iov: make([]syscall.Iovec, 0, maxParts+2)}
	w.writev = w.tryWritev
	return w
}

// push puts st on the run queue; schedule and end call it, once per move
// to queued.
func (w *writer) push(st *sseStream) {
	w.mu.Lock()
	w.queue = append(w.queue, st)
	first := len(w.queue) == 1
	w.mu.Unlock()
	if first {
		select {
		case w.ready <- struct{}{}:
		default:
		}
	}
}

func (w *writer) loop() {
	for {
		select {
		case <-w.ready:
		case <-w.quit:
			return
		}
		w.runQueue()
	}
}

// runQueue runs every stream queued so far; those signalled meanwhile
// wait for the next round.
func (w *writer) runQueue() {
	w.mu.Lock()
	batch := w.queue
	w.queue = w.spare[:0]
	w.mu.Unlock()
	for i, st := range batch {
		if w.begin(st) {
			w.end(st, w.serve(st))
		}
		batch[i] = nil
	}
	w.spare = batch[:0]
}

// begin starts a run of st, unless its own goroutine has taken it back
// since it was queued.
func (w *writer) begin(st *sseStream) bool {
	return st.state.CompareAndSwap(queued, running)
}

// serve writes what st's subscription hands out as frames by reference,
// or the heartbeat its own goroutine asked for, and says whether st goes
// back to its own goroutine: its socket did not take the whole chunk (the
// rest waits in its wire), the write failed, or the subscription needs
// Next.
func (w *writer) serve(st *sseStream) (back bool) {
	select {
	case <-st.sub.Ready(): // this run answers the signal
	default:
	}
	parts, live := st.topicSub.NextFrames(w.parts[:0], maxParts, flushBytes)
	events := len(parts)
	if st.pingDue.Swap(false) && events == 0 && live {
		parts = append(parts, sse.Ping)
	}
	back = !live
	st.mustNext = !live
	if len(parts) > 0 {
		all, err := st.cw.tryWrite(w, parts)
		n := st.measured(parts)
		switch {
		case err != nil:
			st.cw.failed, back = err, true
		case !all:
			st.restEvents, st.restBytes, back = events, n, true
		default:
			st.wrote.Store(time.Now().UnixNano())
			st.delivered(events, n)
		}
	}
	clear(parts)
	w.parts = parts[:0]
	return back
}

// end ends a run of st: it goes to a goroutine of its own if serve says
// so or it was taken back meanwhile, on the run queue if it was
// signalled meanwhile, and back to the pool otherwise.
func (w *writer) end(st *sseStream, back bool) {
	if back {
		st.state.Store(byOwn)
		w.parker.handBack(st)
		return
	}
	for {
		switch st.state.Load() {
		case running:
			if st.state.CompareAndSwap(running, inPool) {
				return
			}
		case runAgain:
			if st.state.CompareAndSwap(runAgain, queued) {
				w.push(st)
				return
			}
		case reclaiming:
			st.state.Store(byOwn)
			w.parker.handBack(st)
			return
		}
	}
}

// tryWritev is the pool's write callback (syscall.RawConn.Write): one
// writev of iov, done when it returns, whatever the socket took, so that
// a full socket comes back as a short count instead of a wait.
func (w *writer) tryWritev(fd uintptr) bool {
	for {
		n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(len(w.iov)))
		switch e {
		case syscall.EINTR:
			continue
		case 0:
			w.n, w.errno = int(n), 0
		case syscall.EAGAIN:
			w.n, w.errno = 0, 0
		default:
			w.n, w.errno = 0, e
		}
		return true
	}
}

// wake is a topic stream's OnReady: while the stream is in the pool, a
// signal of its subscription schedules it on its writer; otherwise it
// wakes its own goroutine.
func (st *sseStream) wake() {
	if !st.schedule() {
		st.cw.wake()
	}
}

// wakeParked is a parking tenant stream's OnReady: a signal hands a
// parked stream to a goroutine of its own, and otherwise wakes the one
// it has.
func (st *sseStream) wakeParked() {
	if st.takeBack() {
		st.parker.handBack(st)
		return
	}
	st.cw.wake()
}

// schedule puts the stream on its writer's run queue, unless it is there
// already or being written (it is then run again after); false if it is
// its own goroutine's.
func (st *sseStream) schedule() bool {
	for {
		switch s := st.state.Load(); s {
		case byOwn:
			return false
		case inPool:
			if st.state.CompareAndSwap(inPool, queued) {
				st.w.push(st)
				return true
			}
		case running:
			if st.state.CompareAndSwap(running, runAgain) {
				return true
			}
		default: // queued, runAgain: it runs after this signal; reclaiming: its goroutine's soon
			return true
		}
	}
}

// enterPool gives the stream's live pushes to its writer. A signal that
// came before the store found the stream its own goroutine's, which was
// not waiting for it: it is taken here and scheduled. A tenant stream,
// which has no writer, is left its signal: park looks at it.
func (st *sseStream) enterPool() {
	st.state.Store(inPool)
	if st.w == nil {
		return
	}
	select {
	case <-st.sub.Ready():
		st.schedule()
	default:
	}
}

// takeBack takes a parked stream out of the pool for a goroutine of its
// own, and reports true if the caller is to start it: the stream was
// parked or queued (a writer that finds it on its queue passes it by).
// If its writer is running it, the writer starts that goroutine when the
// run, which never waits, is over; if the stream is byOwn already, its
// goroutine exists.
func (st *sseStream) takeBack() bool {
	for {
		switch s := st.state.Load(); s {
		case byOwn, reclaiming:
			return false
		case inPool, queued:
			if st.state.CompareAndSwap(s, byOwn) {
				return true
			}
		case running, runAgain:
			if st.state.CompareAndSwap(s, reclaiming) {
				return false
			}
		}
	}
}

// park gives the stream, which has nothing to do, to the parker (and a
// live topic stream to its writer), and reports true if the calling
// goroutine is to return now, holding nothing of the stream. It reports
// false if the stream is the goroutine's again: its client left, the
// server is ending it, or, a tenant stream, it was signalled, while it
// parked. Whoever takes it back stores first why (gone, the context,
// the signal) and then looks at the state; park stores the state and
// then looks at why: one of the two sees the other, and only one of
// them takes it.
func (st *sseStream) park() (bool, error) {
	cw := st.cw
	if err := clearWriteDeadline(cw.conn, cw.endBy); err != nil {
		return false, err
	}
	if err := st.parker.arm(st); err != nil {
		return false, err
	}
	st.buf = nil // a parked stream writes nothing of its own
	if cw.parking != nil {
		cw.parking()
	}
	st.enterPool()
	if st.gone.Load() || st.ctx.Err() != nil || (st.w == nil && len(st.sub.Ready()) > 0) {
		return !st.takeBack(), nil
	}
	return true, nil
}

// ending ends the stream for EndStreams, which has ended its context:
// it shortens a write in progress and wakes a wait, or, if the stream is
// parked, takes it back for a goroutine that ends it.
func (st *sseStream) ending(endBy time.Time) {
	st.wire.ending(endBy)
	if st.parker != nil && st.takeBack() {
		st.parker.handBack(st)
	}
}

// finish writes what the pool's last write left of its chunk, under a
// fresh write deadline as every flush is, and reports whether that
// write, or the pool's, failed: the stream then ends.
func (st *sseStream) finish() error {
	cw := st.cw
	if cw.failed != nil {
		return cw.failed
	}
	if len(cw.rest) == 0 {
		return nil
	}
	if err := setWriteDeadline(cw.conn, cw.endBy, time.Now().Add(st.s.cfg.WriteTimeout)); err != nil {
		cw.broken = true
		return err
	}
	if err := cw.writev(cw.rest); err != nil {
		cw.broken = true // the chunk stays cut
		return fmt.Errorf("write frames: %w", err)
	}
	cw.rest, cw.broken = nil, false
	st.wrote.Store(time.Now().UnixNano())
	st.delivered(st.restEvents, st.restBytes)
	st.restEvents, st.restBytes = 0, 0
	return nil
}

// delivered counts the events of a write that is done (of bytes), and the
// lag of the oldest pushed one (Subscription.Lag).
func (st *sseStream) delivered(events, bytes int) {
	st.sent(events, bytes)
	m := st.s.deps.Metrics
	if events > 0 {
		m.Deliveries.Add(float64(events))
	}
	if lag, ok := st.sub.Lag(); ok {
		m.DeliveryLag.Observe(lag.Seconds())
	}
}

// tryWrite writes parts as one chunk with one writev that does not wait
// (w's). What the socket does not take is kept in rest, by reference:
// the rest of one chunk, which finish writes. A chunk cut partway breaks
// the body until then: end sends no last chunk inside it.
func (cw *connWire) tryWrite(w *writer, parts [][]byte) (all bool, err error) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	hdr := strconv.AppendInt(w.chunkHdr[:0], int64(n), 16)
	hdr = append(hdr, '\r', '\n')
	iov := appendIovec(w.iov[:0], hdr)
	for _, p := range parts {
		iov = appendIovec(iov, p)
	}
	iov = appendIovec(iov, crlf)
	w.iov = iov
	err = cw.raw.Write(w.writev)
	if err == nil && w.errno != 0 {
		err = w.errno
	}
	clear(iov) // hold no frame past its write
	if err != nil {
		cw.broken = true
		return false, fmt.Errorf("write frames: %w", err)
	}
	if w.n == len(hdr)+n+len(crlf) {
		return true, nil
	}
	cw.broken = w.n > 0
	cw.rest = restOf(w.n, hdr, parts)
	return false, nil
}

// restOf is what is left of the chunk hdr, parts and its end once the
// socket took written bytes of it. What is left of hdr, the writer's, is
// copied.
func restOf(written int, hdr []byte, parts [][]byte) net.Buffers {
	rest := make(net.Buffers, 0, len(parts)+2)
	add := func(p []byte) {
		if written >= len(p) {
			written -= len(p)
			return
		}
		rest = append(rest, p[written:])
		written = 0
	}
	if written < len(hdr) {
		rest = append(rest, bytes.Clone(hdr[written:]))
		written = 0
	} else {
		written -= len(hdr)
	}
	for _, p := range parts {
		add(p)
	}
	add(crlf)
	return rest
}

func appendIovec(iov []syscall.Iovec, b []byte) []syscall.Iovec {
	v := syscall.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return append(iov, v)
}

// clearWriteDeadline lifts the write deadline of a stream that goes to
// the pool, whose writes never wait (one left from its last flush would
// fail them once past), but keeps the server's end once EndStreams has
// stored it: it looks at endBy after, as setWriteDeadline does.
func clearWriteDeadline(conn net.Conn, endBy *atomic.Int64) error {
	if err := conn.SetWriteDeadline(time.Time{}); err != nil {
		return fmt.Errorf("set write deadline: %w", err)
	}
	if e := endBy.Load(); e != 0 {
		if err := conn.SetWriteDeadline(time.Unix(0, e)); err != nil {
			return fmt.Errorf("set write deadline: %w", err)
		}
	}
	return nil
}
