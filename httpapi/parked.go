package httpapi

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// parker watches the connections of the parked streams: streams taken
// over from net/http that have nothing to do and hold no goroutine
// (plans/055-parked-streams.md): live topic streams, which their writer
// in the pool writes, and tenant streams waiting for their next signal.
// A parked stream is a socket, a position in its hub's live set and an
// entry here; the parker is what notices, without a goroutine per
// stream, the two things a parked stream's own goroutine used to wait
// for: its client leaving (its connection becomes readable: an end, a
// reset or a byte) and a heartbeat falling due. Its one loop waits in
// epoll_wait on an epoll instance of its own, where each parked
// connection is armed once per park (EPOLLONESHOT), and sweeps the
// parked streams for heartbeats between waits.
type parker struct {
	epfd int
	// quit is a pipe whose read end is in the epoll set: stop writes to
	// it to end the loop.
	quit [2]int
	// every is how often the loop looks for heartbeats due: a heartbeat
	// is written at most every late.
	every time.Duration

	// handBack starts a goroutine of st's own, which st is byOwn for:
	// resume (a test runs it itself). The writers, the parker and
	// EndStreams call it for a stream they took out of the pool.
	handBack func(st *sseStream)

	mu sync.Mutex
	// parked holds every stream that has parked and not ended, by its
	// id, which is its connection's data in the epoll set: a stream's
	// connection is armed for as long as it is parked, and the id
	// outlives none of it.
	parked map[uint64]*sseStream
	lastID uint64
}

// quitID is the pipe's data in the epoll set; stream ids start at 1.
const quitID = 0

// watchedEvents is what arms a parked connection: readable (a byte or
// the end), the peer's half-close, and errors and hang-ups, which epoll
// always reports; once, until the next park arms it again.
const watchedEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

// newParker makes a parker that looks for heartbeats a quarter of
// heartbeat apart (at most a second), so that one falls due at most that
// late.
func newParker(heartbeat time.Duration) (*parker, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	p := &parker{epfd: epfd, every: min(max(heartbeat/4, time.Millisecond), time.Second), parked: map[uint64]*sseStream{},
		handBack: func(st *sseStream) { go st.resume() }}
	if err := syscall.Pipe2(p.quit[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd) //nolint:errcheck // nothing was made of it
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
	setID(&ev, quitID)
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.quit[0], &ev); err != nil {
		p.close()
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	return p, nil
}

func setID(ev *syscall.EpollEvent, id uint64) {
	ev.Fd, ev.Pad = int32(uint32(id)), int32(uint32(id>>32)) //nolint:gosec // the two halves of the 64-bit data
}

func idOf(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32 //nolint:gosec // the two halves of the 64-bit data
}

// arm watches st's connection until it becomes readable once. The
// stream's own goroutine calls it as it parks: first added, then armed
// again (a readiness seen while the stream was not parked is seen again,
// since epoll looks at the socket when it is armed).
func (p *parker) arm(st *sseStream) error {
	op := syscall.EPOLL_CTL_MOD
	if st.parkID == 0 {
		p.mu.Lock()
		p.lastID++
		st.parkID = p.lastID
		p.parked[st.parkID] = st
		p.mu.Unlock()
		op = syscall.EPOLL_CTL_ADD
	}
	ev := syscall.EpollEvent{Events: watchedEvents}
	setID(&ev, st.parkID)
	var err error
	if cerr := st.cw.raw.Control(func(fd uintptr) {
		err = syscall.EpollCtl(p.epfd, op, int(fd), &ev)
	}); cerr != nil {
		return fmt.Errorf("arm the connection: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("arm the connection: %w", err)
	}
	return nil
}

// forget takes an ending stream out of the parker, before its connection
// is closed: no event of another connection, given its descriptor later,
// can reach it.
func (p *parker) forget(st *sseStream) {
	if st.parkID == 0 {
		return
	}
	p.mu.Lock()
	delete(p.parked, st.parkID)
	p.mu.Unlock()
	st.cw.raw.Control(func(fd uintptr) { //nolint:errcheck // a closed connection has left the set already
		syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil) //nolint:errcheck // as above
	})
}

// size is how many streams the parker holds.
func (p *parker) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// loop is the parker's one goroutine. It blocks its thread in
// epoll_wait, outside the Go scheduler, which is one thread for the whole
// server.
func (p *parker) loop() {
	events := make([]syscall.EpollEvent, 128)
	next := time.Now().Add(p.every)
	for {
		n, err := syscall.EpollWait(p.epfd, events, int(max(time.Until(next), 0)/time.Millisecond)+1)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return // the set is closed: the server has ended
		}
		for i := range max(n, 0) {
			id := idOf(&events[i])
			if id == quitID {
				p.close()
				return
			}
			p.mu.Lock()
			st := p.parked[id]
			p.mu.Unlock()
			if st != nil {
				p.look(st)
			}
		}
		if now := time.Now(); !now.Before(next) {
			p.beat(now.UnixNano())
			next = now.Add(p.every)
		}
	}
}

// look finds out why a parked connection became readable, without
// taking anything from it (the stream's goroutine reads what there is,
// as before): nothing after all, and it is armed again; or its client
// has left or spoken, and the stream is taken back for a goroutine of
// its own to end it.
func (p *parker) look(st *sseStream) {
	var one [1]byte
	var nothing bool
	if err := st.cw.raw.Control(func(fd uintptr) {
		_, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		nothing = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR)
	}); err != nil {
		return // closed: its stream is ending already
	}
	if nothing {
		if err := p.arm(st); err == nil {
			return
		}
	}
	st.gone.Store(true)
	if st.takeBack() {
		p.handBack(st)
	}
}

// beat sees to the heartbeats due: a parked stream silent for its
// heartbeat interval is scheduled with a ping for its writer, or, a
// tenant stream, which has no writer, handed to a goroutine that writes
// one. A stream that is not in the pool has a goroutine that keeps its
// own heartbeats; one queued or running is written anyway.
func (p *parker) beat(now int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.parked {
		if st.state.Load() != inPool || now < st.wrote.Load()+int64(st.s.cfg.Heartbeat) {
			continue
		}
		switch {
		case st.w == nil:
			if st.takeBack() {
				p.handBack(st)
			}
		case !st.pingDue.Load():
			st.pingDue.Store(true)
			st.schedule()
		}
	}
}

// stop ends the loop, which closes the epoll set.
func (p *parker) stop() {
	syscall.Write(p.quit[1], []byte{0}) //nolint:errcheck // a full pipe has a byte in it already
}

func (p *parker) close() {
	syscall.Close(p.epfd)    //nolint:errcheck // nothing is left to watch
	syscall.Close(p.quit[0]) //nolint:errcheck // as above
	syscall.Close(p.quit[1]) //nolint:errcheck // as above
}
