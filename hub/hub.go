// Package hub is the StateStreamHub: one actor per tenant/topic that owns
// the topic's head and the set of streams watching it. It hands publishes
// to the committer, fans committed events out to live streams, and decides,
// in one message turn, when a catching-up stream joins the live set: that
// single decision is what makes the join free of holes and duplicates.
package hub

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"edgehub/actors"
	"edgehub/backlog"
	"edgehub/event"
	"edgehub/faults"
	"edgehub/sse"
)

// ErrUnavailable answers a request the hub could not serve because the
// backlog could not be read.
var ErrUnavailable = errors.New("topic unavailable")

// Key is the manager key of a topic. Names cannot hold '/', so the key is
// unambiguous.
func Key(tenant, topic string) string { return tenant + "/" + topic }

// Options are what every hub needs from the process.
type Options struct {
	Log       backlog.Log
	Committer *backlog.Committer
	Root      *actor.RootContext
	Logger    *slog.Logger
	// IdleTicks is how many manager ticks with no stream and no publish in
	// flight make a hub report idle.
	IdleTicks int
	// CheckTicks is how often, in ticks, a hub with live streams compares
	// its head with the log's, catching a commit notice that never came.
	CheckTicks int
	// BeforeIdle, when set, runs inside Receive just before the hub reports
	// idle. Tests use it to hold the hub in the passivation window.
	BeforeIdle func(key string)
}

// Publish asks the hub to commit a request. Reply gets exactly one answer
// once the commit is done; it must have room for it (capacity 1).
type Publish struct {
	Req   *backlog.Append
	Reply chan<- PublishReply
}

// PublishReply is a publish's outcome: a committed, duplicate or refused
// (Result.Err) request, or Err when the commit itself failed.
type PublishReply struct {
	Result backlog.Result
	Err    error
}

// Watch registers a stream. After is its position; FromNow starts it at the
// head. Reply (capacity 1) gets the head and position once it is
// registered, which is when the watcher may send its first byte.
type Watch struct {
	Stream  *Stream
	After   int64
	FromNow bool
	Reply   chan<- Joined
}

// Joined answers Watch. Hub is where the stream sends GoLive and Unwatch.
type Joined struct {
	Head, Position int64
	Hub            *actor.PID
	Err            error
}

// GoLive asks, for a stream that has written everything up to Position from
// the backlog, to join the live set. Reply (capacity 1) gets true if it
// did; false means the head has moved on and there is more to read.
type GoLive struct {
	Stream   *Stream
	Position int64
	Reply    chan<- bool
}

// Unwatch removes a stream whose client has gone.
type Unwatch struct {
	Stream *Stream
}

type committed struct {
	result backlog.Result
	err    error
	items  []*Item
	reply  chan<- PublishReply
}

// Messages that reach a stopped hub (a notice after passivation, an
// Unwatch after the hub ended its streams) are expected, and some carry
// event data: protoactor must not log them as dead letters.
func (*committed) IgnoreDeadLetterLogging() {}
func (*headRead) IgnoreDeadLetterLogging()  {}
func (*GoLive) IgnoreDeadLetterLogging()    {}
func (*Unwatch) IgnoreDeadLetterLogging()   {}

type headRead struct {
	head int64
	err  error
	// check marks a periodic comparison rather than the initial load.
	check bool
}

type hub struct {
	key           string
	tenant, topic string
	opts          *Options

	head     int64
	loaded   bool
	loading  bool
	waiting  []any // routed messages that came before the head was known
	streams  map[*Stream]bool
	live     int
	inflight int
	handled  uint64
	ticks    int
	idle     int
	early    int64 // events answered ahead of their commit (injected fault only)
	retiring bool
}

// Props builds the hub for one topic.
func Props(tenant, topic string, opts *Options) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &hub{key: Key(tenant, topic), tenant: tenant, topic: topic, opts: opts, streams: map[*Stream]bool{}}
	})
}

func (h *hub) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actors.Envelope:
		h.handled++
		h.idle = 0
		if !h.loaded {
			h.waiting = append(h.waiting, msg.Msg)
			h.readHead(ctx, false)
			return
		}
		h.route(ctx, msg.Msg)
	case *committed:
		h.inflight--
		if faults.On("answer-before-commit") {
			h.early = max(0, h.early-int64(len(msg.items)))
		}
		if msg.err == nil {
			h.apply(msg.result, msg.items)
		}
		msg.reply <- PublishReply{Result: msg.result, Err: msg.err}
		if h.retiring && h.inflight == 0 {
			ctx.Stop(ctx.Self())
		}
	case actors.Retire:
		// Nothing more is routed here (the tenant was deleted): end the
		// streams now, answer the publishes in flight, then stop.
		h.retiring = true
		h.endStreams()
		if h.inflight == 0 {
			ctx.Stop(ctx.Self())
		}
	case *GoLive:
		if _, ok := h.streams[msg.Stream]; ok && msg.Position >= h.head {
			h.setLive(msg.Stream, msg.Position)
			msg.Reply <- true
			return
		}
		msg.Reply <- false
	case *Unwatch:
		if live, ok := h.streams[msg.Stream]; ok {
			if live {
				h.live--
			}
			delete(h.streams, msg.Stream)
		}
	case *headRead:
		h.headRead(ctx, msg)
	case actors.Tick:
		h.tick(ctx)
	case *actor.Stopping:
		h.endStreams()
		for _, m := range h.waiting {
			refuse(m, ErrUnavailable)
		}
	}
}

func (h *hub) route(ctx actor.Context, msg any) {
	switch msg := msg.(type) {
	case *Publish:
		if faults.On("answer-before-commit") {
			h.answerEarly(ctx, msg)
			return
		}
		h.inflight++
		self, root, reply := ctx.Self(), h.opts.Root, msg.Reply
		h.opts.Committer.Submit(msg.Req, func(r backlog.Result, err error) {
			root.Send(self, &committed{result: r, err: err, items: encode(r.Events), reply: reply})
		})
	case *Watch:
		pos := msg.After
		if msg.FromNow {
			pos = h.head
		}
		h.streams[msg.Stream] = false
		if pos >= h.head || faults.On("replay-after-live") {
			// (Injected bug: live at the head before the replay.)
			h.setLive(msg.Stream, max(pos, h.head))
		}
		msg.Reply <- Joined{Head: h.head, Position: pos, Hub: ctx.Self()}
	}
}

// answerEarly is an injected bug: it answers a publish with the numbers it
// expects to get, before the commit, which it then slows down.
func (h *hub) answerEarly(ctx actor.Context, msg *Publish) {
	first := h.head + h.early + 1
	h.early += int64(len(msg.Req.Events))
	msg.Reply <- PublishReply{Result: backlog.Result{First: first, Last: first + int64(len(msg.Req.Events)) - 1, Batch: msg.Req.Batch}}
	h.inflight++
	self, root := ctx.Self(), h.opts.Root
	time.AfterFunc(50*time.Millisecond, func() {
		h.opts.Committer.Submit(msg.Req, func(r backlog.Result, err error) {
			root.Send(self, &committed{result: r, err: err, items: encode(r.Events), reply: make(chan PublishReply, 1)})
		})
	})
}

// endStreams ends every stream; their clients reconnect with Last-Event-ID.
func (h *hub) endStreams() {
	for s := range h.streams {
		s.end()
	}
	clear(h.streams)
	h.live = 0
}

func (h *hub) setLive(s *Stream, position int64) {
	if !h.streams[s] {
		h.live++
	}
	h.streams[s] = true
	s.live(position)
}

// apply advances the head by a committed result and pushes its events to
// the live set. A notice that is old is ignored; one that skips ahead (a
// lost notice) moves the head and sends every live stream back to the
// backlog, which holds the missing range.
func (h *hub) apply(r backlog.Result, items []*Item) {
	if len(items) == 0 || r.Last <= h.head {
		return
	}
	if r.First != h.head+1 {
		h.head = r.Last
		h.demoteAll()
		return
	}
	h.head = r.Last
	if h.live == 0 {
		return
	}
	for s, live := range h.streams {
		if live && !s.offer(items) {
			h.streams[s] = false
			h.live--
		}
	}
}

func (h *hub) demoteAll() {
	for s, live := range h.streams {
		if live {
			s.demote()
			h.streams[s] = false
		}
	}
	h.live = 0
}

func (h *hub) tick(ctx actor.Context) {
	h.ticks++
	if h.opts.CheckTicks > 0 && h.ticks%h.opts.CheckTicks == 0 && h.live > 0 && h.inflight == 0 {
		h.readHead(ctx, true)
	}
	if h.loading || len(h.streams) > 0 || h.inflight > 0 || len(h.waiting) > 0 {
		h.idle = 0
		return
	}
	h.idle++
	if h.idle < h.opts.IdleTicks {
		return
	}
	h.idle = 0
	if h.opts.BeforeIdle != nil {
		h.opts.BeforeIdle(h.key)
	}
	ctx.Request(ctx.Parent(), &actors.Idle{Key: h.key, Handled: h.handled})
}

// readHead reads the log's head in a goroutine and sends it back: the hub
// never waits on disk inside Receive.
func (h *hub) readHead(ctx actor.Context, check bool) {
	if h.loading {
		return
	}
	h.loading = true
	self, root, log := ctx.Self(), h.opts.Root, h.opts.Log
	tenant, topic := h.tenant, h.topic
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		head, err := log.Head(c, tenant, topic)
		root.Send(self, &headRead{head: head, err: err, check: check})
	}()
}

func (h *hub) headRead(ctx actor.Context, msg *headRead) {
	h.loading = false
	if msg.err != nil {
		h.opts.Logger.Error("read head", "topic", h.key, "err", msg.err)
		for _, m := range h.waiting {
			refuse(m, ErrUnavailable)
		}
		h.waiting = nil
		return
	}
	if msg.check {
		if msg.head > h.head && h.inflight == 0 {
			h.head = msg.head
			h.demoteAll()
		}
		return
	}
	h.head, h.loaded = msg.head, true
	waiting := h.waiting
	h.waiting = nil
	for _, m := range waiting {
		h.route(ctx, m)
	}
}

func refuse(msg any, err error) {
	switch m := msg.(type) {
	case *Publish:
		m.Reply <- PublishReply{Err: err}
	case *Watch:
		m.Reply <- Joined{Err: err}
	}
}

// encode builds each event's frame once, in the committer's goroutine, so
// that fan-out to many streams shares the bytes and the hub does no
// encoding in Receive.
func encode(events []event.Event) []*Item {
	items := make([]*Item, len(events))
	for i := range events {
		items[i] = &Item{Event: events[i], Frame: sse.AppendEvent(nil, &events[i])}
	}
	return items
}
