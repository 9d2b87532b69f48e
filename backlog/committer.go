package backlog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// ErrClosed answers a request queued after the committer was closed.
var ErrClosed = errors.New("backlog committer is closed")

// Committer groups the publish requests of every topic into shared
// transactions: while one commit runs, the requests that arrive queue up
// and go into the next. Grouping is where publish throughput comes from,
// since each commit pays one fsync however many events it holds.
type Committer struct {
	log       Log
	maxEvents int
	observe   func(time.Duration, int)
	delay     time.Duration
	waiting   func(want int)

	mu      sync.Mutex
	pending []queued
	closed  bool
	wake    chan struct{}
	stopped chan struct{}

	// The flush stage, when the log is a Store whose commits are made
	// durable apart from the transactions that make them visible
	// (SQLite's WAL, flushed by the store): the committer runs the next
	// commit's statements while the last one's flush is in progress, and
	// one flush covers every commit made visible before it began; readers
	// wait for the flush of what they see (walSync.seen). Commits made
	// visible and not yet durable wait in unflushed for the flusher, which
	// flushes them together and only then answers them. ran says the
	// commit stage has ended, so the flusher ends once unflushed is empty.
	// Any other Log (a test's wrapper, say) commits durably in CommitBatch.
	//
	// unanswered counts the requests of commits made visible and not yet
	// answered. While it is not zero, the next commit waits until as many
	// requests are queued, or the flush is over (awaitFlush): publishers
	// that wait for their answers come back only after the flush, and a
	// commit of the few that came meanwhile would split them into two
	// groups that each pay a flush from then on, where one group paid one.
	// With more publishers than a group, the next group is queued at once
	// and its statements run during the flush.
	pipe         *Store
	unflushed    []visibleCommit
	unanswered   int
	ran          bool
	flushWake    chan struct{}
	flushed      chan struct{}
	waitingFlush func(queued, unanswered int)
}

// visibleCommit is a commit whose answers wait for its flush.
type visibleCommit struct {
	batch   []queued
	results []Result
	err     error
	start   time.Time
}

type queued struct {
	req  *Publish
	done func(Result, error)
}

// CommitterOptions tune a Committer.
type CommitterOptions struct {
	// MaxEvents caps one transaction, so a flood of batches cannot make a
	// single commit unbounded; a larger single request still goes alone.
	MaxEvents int
	// Observe, when set, is told each commit's duration and the events it
	// appended (a duplicate or a refused request appends none).
	Observe func(d time.Duration, appended int)
	// Delay is the longest a commit waits for its siblings: when fewer
	// requests are queued than the last commit held, their publishers are
	// likely on their way back with the next ones (each waited for its
	// answer), and one commit for all of them costs one fsync instead of
	// several. A lone publisher does not wait (its last commit held one),
	// except once after a commit that held more; requests that MaxEvents
	// left out of a commit do not wait again. Zero turns the wait off.
	// PostgreSQL's commit_delay and commit_siblings are the same idea.
	Delay time.Duration
	// Waiting, when set (by a test), is called when a commit starts to
	// wait for want requests.
	Waiting func(want int)
	// WaitingFlush, when set (by a test), is called when a commit starts
	// to wait for the last one's flush.
	WaitingFlush func(queued, unanswered int)
}

// NewCommitter starts the goroutine that commits for log.
func NewCommitter(log Log, opts CommitterOptions) *Committer {
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = 20000
	}
	c := &Committer{
		log:       log,
		maxEvents: opts.MaxEvents,
		observe:   opts.Observe,
		delay:     opts.Delay,
		waiting:   opts.Waiting,
		wake:      make(chan struct{}, 1),
		stopped:   make(chan struct{}),
		flushWake: make(chan struct{}, 1),
		flushed:   make(chan struct{}),

		waitingFlush: opts.WaitingFlush,
	}
	if s, ok := log.(*Store); ok && s.wal != nil {
		c.pipe = s
		go c.flusher()
	} else {
		close(c.flushed)
	}
	go c.run()
	return c
}

// Commit queues req; done is called from the committer's goroutine once the
// request is committed or has failed. Commit never blocks, so an actor may
// call it from Receive.
func (c *Committer) Commit(req *Publish, done func(Result, error)) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		done(Result{}, ErrClosed)
		return
	}
	c.pending = append(c.pending, queued{req, done})
	c.mu.Unlock()
	poke(c.wake)
}

// poke signals ch (capacity 1) without blocking.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Close commits everything queued so far, then stops the goroutine.
func (c *Committer) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	poke(c.wake)
	<-c.stopped
}

func (c *Committer) run() {
	defer close(c.stopped)
	defer func() {
		c.mu.Lock()
		c.ran = true
		c.mu.Unlock()
		poke(c.flushWake)
		<-c.flushed
	}()
	var timer *time.Timer
	if c.delay > 0 {
		timer = time.NewTimer(c.delay)
		timer.Stop()
	}
	siblings := 0 // requests in the last commit
	for range c.wake {
		for {
			c.awaitFlush()
			if timer != nil {
				c.awaitSiblings(siblings, timer)
			}
			batch, rest, closed := c.take()
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
			c.commit(batch)
			siblings = len(batch)
			if rest {
				siblings = 0 // the requests MaxEvents left behind have waited already
			}
		}
	}
}

// awaitSiblings waits, for at most the delay, until as many requests are
// queued as the last commit held (want), or the committer is closed.
func (c *Committer) awaitSiblings(want int, timer *time.Timer) {
	if c.queued() >= want {
		return
	}
	if c.waiting != nil {
		c.waiting(want)
	}
	timer.Reset(c.delay)
	defer timer.Stop()
	for c.queued() < want {
		select {
		case <-c.wake:
		case <-timer.C:
			return
		}
	}
}

// awaitFlush waits while the last commits' flush is in progress and fewer
// requests are queued than it is to answer (see unanswered).
func (c *Committer) awaitFlush() {
	for {
		c.mu.Lock()
		queued, unanswered := len(c.pending), c.unanswered
		wait := !c.closed && unanswered > 0 && queued < unanswered
		c.mu.Unlock()
		if !wait {
			return
		}
		if c.waitingFlush != nil {
			c.waitingFlush(queued, unanswered)
		}
		<-c.wake
	}
}

// queued is how many requests wait, or a number no wait asks for once the
// committer is closed (Close must not wait on siblings).
func (c *Committer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return math.MaxInt
	}
	return len(c.pending)
}

// take removes the next transaction's worth of requests from the queue,
// and reports whether it left some behind.
func (c *Committer) take() (batch []queued, rest, closed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, events := 0, 0
	for n < len(c.pending) && (n == 0 || events+len(c.pending[n].req.Events) <= c.maxEvents) {
		events += len(c.pending[n].req.Events)
		n++
	}
	batch = c.pending[:n:n]
	c.pending = c.pending[n:]
	if len(c.pending) == 0 {
		c.pending = nil
	}
	return batch, len(c.pending) > 0, c.closed
}

func (c *Committer) commit(batch []queued) {
	reqs := make([]*Publish, len(batch))
	for i, s := range batch {
		reqs[i] = s.req
	}
	start := time.Now()
	if c.pipe != nil {
		results, err := c.pipe.commitVisible(context.Background(), reqs)
		c.mu.Lock()
		c.unflushed = append(c.unflushed, visibleCommit{batch, results, err, start})
		c.unanswered += len(batch)
		c.mu.Unlock()
		poke(c.flushWake)
		return
	}
	results, err := c.log.CommitBatch(context.Background(), reqs)
	c.answer(visibleCommit{batch, results, err, start})
}

// flusher is the pipeline's second stage: it flushes every commit made
// visible since its last flush at once, then answers them in commit order.
// A flush that fails answers every commit it was to cover with its error:
// they are visible, but a power loss may take them back.
func (c *Committer) flusher() {
	defer close(c.flushed)
	for range c.flushWake {
		for {
			c.mu.Lock()
			commits, ran := c.unflushed, c.ran
			c.unflushed = nil
			c.mu.Unlock()
			if len(commits) == 0 {
				if ran {
					return
				}
				break
			}
			err := c.pipe.flush()
			answered := 0
			for _, v := range commits {
				if v.err == nil && err != nil {
					v.err, v.results = fmt.Errorf("commit of %d requests: %w", len(v.batch), err), nil
				}
				c.answer(v)
				answered += len(v.batch)
			}
			c.mu.Lock()
			c.unanswered -= answered
			c.mu.Unlock()
			poke(c.wake)
		}
	}
}

// answer tells a commit's publishers what it came to, once it is durable.
func (c *Committer) answer(v visibleCommit) {
	if c.observe != nil && v.err == nil {
		took, appended := time.Since(v.start), 0
		for i := range v.results {
			appended += len(v.results[i].Events)
		}
		c.observe(took, appended)
	}
	for i, s := range v.batch {
		if v.err != nil {
			s.done(Result{}, v.err)
			continue
		}
		s.done(v.results[i], nil)
	}
}
