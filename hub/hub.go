// Package hub owns each topic's protocol end to end: one actor per
// tenant/topic holds the topic's head and its streams, hands publishes to
// the committer and fans committed events out; a Subscription, on the
// watcher's side, catches up from the backlog and joins the live set in one
// hub turn, which is what makes the join free of holes and duplicates.
// Transports reach it through Router and never see an actor.
//
// The join, read top to bottom: hub.join registers a stream in the live
// set (its position is the head) or the catching-up set; a catching-up
// Subscription reads the backlog in pages (subscription.go) and sends
// goLive at its position; hub.goLive moves it to the live set only if that
// position is the head, else it reads more; hub.apply pushes each commit
// to the live set and demotes a stream whose queue is full back to
// catching up; hub.endAll ends every stream when the hub goes away.
package hub

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/edgehub/edgehub/actors"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
)

// Messages between the Router, the subscriptions and a hub. Those that can
// reach a stopped hub (a notice after passivation, an unwatch after the
// hub ended its streams) are expected, and some carry event data:
// protoactor must not log them as dead letters.
type (
	// publish asks the hub to commit a request; reply (capacity 1) gets
	// exactly one answer once the commit is done.
	publish struct {
		req   *backlog.Publish
		reply chan<- publishReply
	}
	publishReply struct {
		result backlog.Result
		err    error // the commit failed (not a refusal: that is result.Err)
	}
	// watch registers a stream after position, or at the head if fromNow;
	// reply (capacity 1) gets the head and position once it is registered.
	watch struct {
		stream   *stream
		position int64
		fromNow  bool
		reply    chan<- joined
	}
	joined struct {
		head, position int64
		// live says the stream joined the live set; else it reads the
		// backlog up to until (0: up to the head) and then asks goLive.
		live  bool
		until int64
		hub   *actor.PID // where goLive and unwatch go
		err   error
	}
	// goLive asks, for a stream that has handed out everything up to
	// position from the backlog, to join the live set; reply (capacity 1)
	// says whether it did, and if not, how far to read before asking again.
	goLive struct {
		stream   *stream
		position int64
		reply    chan<- liveReply
	}
	liveReply struct {
		live  bool
		until int64 // see joined.until
		head  int64 // the hub's head when it took the stream live
	}
	// unwatch removes a stream whose client has gone.
	unwatch struct{ stream *stream }
	// committed is the committer's notice of a commit, back in the hub's
	// mailbox: its events to fan out (none if the commit failed or was
	// refused). Its publisher is answered apart, by the committer.
	committed struct {
		items []*item
	}
	// headRead is the log's head, read outside the actor.
	headRead struct {
		head int64
		err  error
	}
	// remoteCommit is a hint that another process sharing the log
	// committed first..last of the topic. It may be lost, late, repeated
	// or out of order: the hub reads what it names from the log.
	remoteCommit struct{ first, last int64 }
	// fetched is a range read from the log for a hint or a check.
	fetched struct {
		page  backlog.Page
		items []*item
		err   error
		// hints is the hub's count of hints when the read began.
		hints uint64
	}
)

func (*remoteCommit) IgnoreDeadLetterLogging() {}
func (*fetched) IgnoreDeadLetterLogging()      {}

func (*committed) IgnoreDeadLetterLogging() {}
func (*headRead) IgnoreDeadLetterLogging()  {}
func (*goLive) IgnoreDeadLetterLogging()    {}
func (*unwatch) IgnoreDeadLetterLogging()   {}

// hub is the actor of one topic. All its fields are owned by its Receive:
// no lock guards them because nothing else touches them.
type hub struct {
	tenant, topic string   // the topic it serves; fixed
	opts          *Options // what every hub shares; read-only

	// head is the newest sequence number the hub knows to be committed. The
	// log may be ahead (a notice on its way, or lost): a stream that reads
	// past it may still go live, and the periodic check catches up.
	head int64
	// loaded says head is known: read from the log, or taken from the
	// hub's first own commit, whose transaction numbered its events after
	// the topic's head as the log held it (so a new topic's first publish
	// reads nothing: plan 037). Until then watches wait in waiting, and
	// loading says a read is in flight; publishes go to the committer.
	loaded, loading bool
	waiting         []any
	// heard is the process's Hearing as the hub began to learn its head
	// (its first read or publish, marked): whether it has heard every
	// hint since (forgetIfDeaf).
	heard  uint64
	marked bool

	// live holds the streams at the head: each commit is pushed into their
	// queues. catchingUp holds the registered streams behind it, reading
	// the backlog; the hub pushes nothing to them.
	live, catchingUp streamSet[*stream]
	// recent holds the newest commits, up to head: a stream whose position
	// is among them joins live at once and is given the rest from here.
	recent recent

	// behind is the newest sequence number the log is known to hold (from
	// a hint or a check) beyond head; fetching says a read of the range
	// after head is in flight.
	behind   int64
	fetching bool
	// hints counts the hints, checks and own commits past the head that
	// raised behind, so that a read knows whether another came while it
	// was out.
	hints uint64
	// ahead holds this process's own commits (their items) that do not
	// follow head yet: another process committed the range between, and
	// its hint is on its way or its read is in flight. In commit order.
	ahead [][]*item

	// inflight counts publishes handed to the committer and not answered.
	inflight int
	// retiring says nothing more is routed here: stop once inflight is 0.
	retiring bool
	// idle is the child half of the manager's passivation protocol.
	idle actors.Idleness
	// ticks counts manager ticks, for the periodic head check.
	ticks int
}

func (h *hub) key() string { return Key(h.tenant, h.topic) }

func (h *hub) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actors.Envelope:
		h.idle.Handled()
		if !h.loaded {
			if !h.marked {
				h.heard, h.marked = h.opts.Hearing.mark(), true
			}
			if _, ok := msg.Msg.(*publish); !ok {
				h.waiting = append(h.waiting, msg.Msg)
				h.readHead(ctx)
				return
			}
		}
		h.route(ctx, msg.Msg)
	case *goLive:
		h.forgetIfDeaf()
		live, until := h.goLive(msg.stream, msg.position)
		msg.reply <- liveReply{live: live, until: until, head: h.head}
	case *unwatch:
		h.live.remove(msg.stream)
		h.catchingUp.remove(msg.stream)
	case *committed:
		h.inflight--
		loads := !h.loaded && !h.retiring && len(msg.items) > 0
		if loads {
			first, _ := span(msg.items)
			h.head, h.loaded = first-1, true
		}
		h.applyOwn(ctx, msg.items)
		if loads {
			h.routeWaiting(ctx)
		}
		h.stopIfRetired(ctx)
	case *headRead:
		h.headRead(ctx, msg)
	case *remoteCommit:
		h.hints++
		h.behind = max(h.behind, msg.last)
		h.logAt(msg.last)
		h.fetch(ctx)
	case *fetched:
		h.fetched(ctx, msg)
	case actors.Retire:
		// Nothing more is routed here (the tenant was deleted or rotated):
		// end the streams now, answer the publishes in flight, then stop.
		h.retiring = true
		h.endAll()
		h.stopIfRetired(ctx)
	case actors.Tick:
		h.tick(ctx)
	case *actor.Stopping:
		h.endAll()
		h.recent.reset()
		for _, m := range h.waiting {
			refuse(m, ErrUnavailable)
		}
	}
}

// route handles a message the Router sent, once the head is known.
func (h *hub) route(ctx actor.Context, msg any) {
	switch msg := msg.(type) {
	case *publish:
		h.inflight++
		self, opts, reply, tenant, topic := ctx.Self(), h.opts, msg.reply, h.tenant, h.topic
		h.opts.Committer.Commit(msg.req, func(r backlog.Result, err error) {
			// The hubs hear of the commit before its publisher is
			// answered: a stream opened after the answer (of the topic or
			// of its tenant) is routed behind the notice, so it starts at
			// or past the commit. The committer answers the publisher
			// itself, which then waits for no mailbox, and no publisher
			// waits for a fan-out (plan 056).
			var items []*item
			if err == nil {
				if r.Err == nil && !r.Duplicate {
					opts.committed(tenant, topic, r.Events)
				}
				items = opts.encode(r.Events)
			}
			opts.root.Send(self, &committed{items: items})
			reply <- publishReply{result: r, err: err}
		})
	case *watch:
		position := msg.position
		if msg.fromNow {
			position = h.head
		}
		h.forgetIfDeaf()
		live := h.join(msg.stream, position)
		msg.reply <- joined{head: h.head, position: position, live: live, until: h.readUntil(position), hub: ctx.Self()}
	}
}

// join registers a stream and says whether it is live: at once if its
// position is the head (or beyond: it waits there for its position) or
// among the recent commits, which it is given; else it catches up.
func (h *hub) join(s *stream, position int64) bool {
	switch {
	case h.opts.faults.joinLive && position < h.head:
		h.live.add(s)
		s.arm(h.head)
		return false
	case h.recent.covers(position, h.head):
		h.live.add(s)
		h.give(s, position)
		return true
	}
	h.catchingUp.add(s)
	return false
}

// goLive is the decision the join turns on: a catching-up stream that has
// handed out everything up to position joins the live set in this turn
// only if every commit after position is among the recent ones (none, at
// the head), which it is given; otherwise it reads more, up to where the
// recent ones start. Events committed while it caught up are never lost:
// they are in the backlog.
func (h *hub) goLive(s *stream, position int64) (live bool, until int64) {
	if !h.recent.covers(position, h.head) {
		return false, h.readUntil(position)
	}
	switch {
	case h.catchingUp.has(s):
		h.catchingUp.remove(s)
		h.live.add(s)
	case !h.live.has(s):
		return false, 0 // no longer registered: ended, or its client left
	}
	h.give(s, position)
	return true, 0
}

// give arms a stream that joins the live set at position and pushes it the
// recent commits after position; if they do not fit, in its queue or in
// the read budget, it is demoted at once.
func (h *hub) give(s *stream, position int64) {
	s.arm(position)
	items := h.recent.after(position)
	if len(items) == 0 {
		return
	}
	if !h.pin(items) {
		s.demote()
		h.demote(s)
		return
	}
	if !s.offer(items) {
		h.demote(s)
	}
	h.unpin(items)
}

// pin takes a reference to each of items for the hub while it offers them
// to live queues, and takes the bytes of those that no queue held from
// the tenant's share of the read budget: the events that live streams
// hold are counted there once, however many streams hold them. It takes
// nothing and says false when the budget has no room: the streams then
// catch up from the backlog, waiting for room as catching-up streams do.
func (h *hub) pin(items []*item) bool {
	var n int64
	for _, it := range items {
		if it.refs.Add(1) == 1 {
			n += it.size()
		}
	}
	if h.opts.ReadBudget.Grow(h.tenant, n) {
		return true
	}
	// Only the hub adds references, so the ones it made from none are
	// still its own alone: taking them back charges and frees nothing.
	for _, it := range items {
		it.refs.Add(-1)
	}
	return false
}

// unpin lets go of the hub's references once the items are offered; the
// bytes of those that no queue took go back.
func (h *hub) unpin(items []*item) {
	h.opts.ReadBudget.Shrink(h.tenant, release(items))
}

// readUntil is how far a stream at position reads the backlog before it
// asks to go live: up to the recent commits, or to the head (0) if none
// is buffered.
func (h *hub) readUntil(position int64) int64 {
	if first := h.recent.first(h.head + 1); first <= h.head && position < first-1 {
		return first - 1
	}
	return 0
}

// applyOwn applies a commit of this process's: at once if it follows the
// head; if another process committed a range in between (on a shared
// log), it waits in ahead while the hub reads that range, so the live
// streams get both in order without going back to the backlog. A retired
// hub has no streams left; it hands the commit on instead.
func (h *hub) applyOwn(ctx actor.Context, items []*item) {
	if len(items) == 0 {
		return
	}
	first, last := span(items)
	switch {
	case h.retiring:
		// The hub that replaced this one may have read its head before
		// the commit landed, and hears no hint of it: the process's own
		// hints are not for it (backlog/hints.go). So this hub sends one;
		// the manager passes it to the hub that runs for the topic now,
		// if any, and a hub it starts later reads its head after the
		// commit.
		actors.NotifyFrom(ctx, h.key(), &remoteCommit{first: first, last: last})
	case last <= h.head:
	case first == h.head+1 && len(h.ahead) == 0:
		h.apply(items)
	case len(h.ahead) == maxAhead:
		// The range before them does not come: the live streams read
		// the backlog instead.
		h.skipTo(last)
		h.ahead = nil
	default:
		h.ahead = append(h.ahead, items)
		// The commit tells, as a hint would, that the log holds the
		// range before it: a read already out may not have seen that
		// range, and its answer must not take behind back down.
		h.hints++
		h.behind = max(h.behind, first-1)
		h.logAt(last)
		h.fetch(ctx)
	}
}

// span is the range of a commit's items, which are never none.
func span(items []*item) (first, last int64) {
	return items[0].Event.Seq, items[len(items)-1].Event.Seq
}

// maxAhead bounds the own commits a hub holds while it reads the range
// before them.
const maxAhead = 64

// applyAhead applies the own commits that follow the head now, and drops
// those that a read of the log brought already.
func (h *hub) applyAhead() {
	for len(h.ahead) > 0 {
		first, last := span(h.ahead[0])
		switch {
		case last <= h.head:
		case first == h.head+1:
			h.apply(h.ahead[0])
		default:
			return
		}
		h.ahead = h.ahead[1:]
	}
	h.ahead = nil // the emptied array goes
}

// demote sends a live stream back to catching up at what it was given.
func (h *hub) demote(s *stream) {
	h.live.remove(s)
	h.catchingUp.add(s)
	h.opts.Metrics.Demotions.Inc()
}

// apply advances the head by a commit's items, which follow it (applyOwn
// and fetched see to that), and pushes them to the live set; a stream
// whose queue is full is demoted, and so is every live stream when the
// read budget has no room for the items.
func (h *hub) apply(items []*item) {
	h.head = items[len(items)-1].Event.Seq
	h.recent.add(items)
	if h.live.len() == 0 {
		return
	}
	if !h.pin(items) {
		h.demoteAll()
		return
	}
	for s := range h.live.m {
		if !s.offer(items) {
			h.demote(s)
		}
	}
	h.unpin(items)
}

func (h *hub) demoteAll() {
	for s := range h.live.m {
		s.demote()
		h.demote(s)
	}
}

// endAll ends every stream; their clients reconnect with Last-Event-ID.
func (h *hub) endAll() {
	for _, set := range []streamSet[*stream]{h.live, h.catchingUp} {
		for s := range set.m {
			s.end()
		}
		set.clear()
	}
}

func (h *hub) stopIfRetired(ctx actor.Context) {
	if h.retiring && h.inflight == 0 {
		ctx.Stop(ctx.Self())
	}
}

// ageMargin is how much sooner than the backlog's age retention the
// recent commits let an event go: the hub's clock ticks once a second.
const ageMargin = 5 * time.Second

// tick runs the periodic head check, the recent commits' expiry and the
// passivation clock.
func (h *hub) tick(ctx actor.Context) {
	h.ticks++
	if h.opts.RetentionAge > 0 {
		h.recent.expire(time.Now().Add(-h.opts.RetentionAge + ageMargin))
	}
	if h.opts.CheckTicks > 0 && h.ticks%h.opts.CheckTicks == 0 && h.live.len() > 0 && h.inflight == 0 {
		h.readHead(ctx)
	}
	h.fetch(ctx) // again, if the last read failed
	busy := h.loading || h.fetching || h.live.len()+h.catchingUp.len() > 0 || h.inflight > 0 || len(h.waiting) > 0 || len(h.ahead) > 0
	if h.idle.Tick(busy, h.opts.IdleTicks) {
		if h.opts.Hooks.BeforeIdle != nil {
			h.opts.Hooks.BeforeIdle(h.key())
		}
		h.idle.Report(ctx, h.key())
	}
}

// readHead reads the log's head in a goroutine and sends it back: the hub
// never waits on disk inside Receive.
func (h *hub) readHead(ctx actor.Context) {
	if h.loading {
		return
	}
	h.loading = true
	self, root, store := ctx.Self(), h.opts.root, h.opts.Log
	tenant, topic := h.tenant, h.topic
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		head, err := store.Head(c, tenant, topic)
		root.Send(self, &headRead{head: head, err: err})
	}()
}

func (h *hub) headRead(ctx actor.Context, msg *headRead) {
	h.loading = false
	if h.opts.Hooks.HeadRead != nil {
		defer h.opts.Hooks.HeadRead(h.key())
	}
	if msg.err != nil {
		h.opts.Logger.Error("read head", "topic", h.key(), "err", msg.err)
		for _, m := range h.waiting {
			refuse(m, ErrUnavailable)
		}
		h.waiting = nil
		return
	}
	if h.loaded { // a check, or a first read that the hub's first commit overtook
		h.hints++
		h.behind = max(h.behind, msg.head)
		h.logAt(msg.head)
		h.fetch(ctx)
		return
	}
	h.head, h.loaded = msg.head, true
	h.routeWaiting(ctx)
}

// routeWaiting routes what waited for the head, once it is known.
func (h *hub) routeWaiting(ctx actor.Context) {
	waiting := h.waiting
	h.waiting = nil
	for _, m := range waiting {
		h.route(ctx, m)
	}
	h.fetch(ctx) // a hint heard while the head was not known
}

// fetchBytes bounds one read of the range a hint names, taken from the
// read budget.
const fetchBytes = 256 << 10

// fetch reads, in a goroutine, the events after head that the log is known
// to hold (behind), so that a commit made by another process reaches the
// live set as its own commits do: one read for the hub, not one per
// stream. One read is in flight at a time.
func (h *hub) fetch(ctx actor.Context) {
	if h.fetching || !h.loaded || h.behind <= h.head {
		return
	}
	h.fetching = true
	self, opts := ctx.Self(), h.opts
	tenant, topic, after, hints := h.tenant, h.topic, h.head, h.hints
	go func() {
		// The budget holds the read while it is out; what it brings then
		// joins the recent commits and the live queues, which have bounds
		// of their own (or is dropped, if the hub has gone).
		release, refused := opts.ReadBudget.TryTake(tenant, 2*fetchBytes)
		if refused != nil {
			opts.root.Send(self, &fetched{err: refused, hints: hints})
			return
		}
		defer release()
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		page, err := opts.Log.Read(c, tenant, topic, after, opts.PageSize, fetchBytes)
		opts.root.Send(self, &fetched{page: page, items: opts.encode(page.Events), err: err, hints: hints})
	}()
}

// fetched applies a range read from the log: the events after head, if
// they follow it, as a commit; if they do not (retention removed some),
// the head moves to the log's and every live stream goes back to the
// backlog, which tells each what it lost. A read that failed (or that the
// budget refused) is tried again at the next tick. The log's head, as
// read, is the truth: a hint that named more (of a topic deleted since)
// is forgotten, unless another (or an own commit past the head) came while
// the read was out.
func (h *hub) fetched(ctx actor.Context, msg *fetched) {
	h.fetching = false
	if msg.err != nil {
		h.opts.Logger.Warn("read a range another process committed; trying again", "topic", h.key(), "err", msg.err)
		return
	}
	if h.hints == msg.hints {
		h.behind = msg.page.Head
	}
	h.logAt(msg.page.Head)
	items := msg.items
	for len(items) > 0 && items[0].Event.Seq <= h.head {
		items = items[1:]
	}
	switch {
	case len(items) > 0 && items[0].Event.Seq == h.head+1:
		h.apply(items)
	case msg.page.Head > h.head:
		h.skipTo(msg.page.Head)
	}
	h.applyAhead()
	h.fetch(ctx)
}

// logAt notes that the log's head has reached head (a hint, a head check,
// a read or an own commit past the hub's head says so). Count retention
// keeps the newest RetentionEvents of the log's head, so it may remove
// every event up to head-RetentionEvents from now on: the recent commits
// let those go at once, and hold none of them later (a read brings them,
// say), so a stream behind them reads the log, which gives it the gap it
// gives on every process. Below the hub's own head, the cap on the recent
// commits (at most RetentionEvents) does as much already.
func (h *hub) logAt(head int64) {
	if h.opts.RetentionEvents > 0 {
		h.recent.keepAfter(head - h.opts.RetentionEvents)
	}
}

// forgetIfDeaf empties the recent commits of a hub that may have missed a
// hint since it read its head (the process's listener lost its
// connection): the log may have moved on by any number of commits, and
// count retention removed what they pushed out, without the hub knowing.
// A stream behind then reads the log. It runs before every join and
// every goLive; such a hub is retired once the listener is back
// (Router.EndAll), and its successor reads its head.
func (h *hub) forgetIfDeaf() {
	if !h.opts.Hearing.heardSince(h.heard) {
		h.recent.reset()
	}
}

// skipTo moves the head past commits the hub cannot push: every live
// stream goes back to the backlog, which holds the range (or says what
// retention removed).
func (h *hub) skipTo(head int64) {
	if head <= h.head {
		return
	}
	h.head = head
	h.recent.reset()
	h.demoteAll()
}

func refuse(msg any, err error) {
	switch m := msg.(type) {
	case *publish:
		m.reply <- publishReply{err: err}
	case *watch:
		m.reply <- joined{err: err}
	}
}

// encode builds each event's envelope once, in the committer's goroutine
// (or the goroutine that read another process's commit), so that fan-out
// to many streams shares the bytes and the hub does no encoding in
// Receive; it stamps them with the moment the process learned they were
// durable, which is now.
func (o *Options) encode(events []event.Event) []*item {
	items := make([]*item, len(events))
	learned := o.clock()
	for i := range events {
		it := &item{Event: events[i], learned: learned}
		if o.Framing.Start == nil {
			it.Envelope = it.Event.AppendEnvelope(nil)
		} else {
			it.Frame, it.Envelope = o.Framing.frame(&it.Event)
		}
		items[i] = it
	}
	return items
}

// Framing is how the transport that writes most streams frames a live
// event around its envelope (SSE: the id and event lines and "data: "
// before it, the blank line after). Given to the router, it has each live
// event's frame built once, with its envelope, so that every stream
// writes the same bytes by reference instead of copying them into a
// buffer of its own (Subscription.NextFrames).
type Framing struct {
	// Start appends what comes before the envelope.
	Start func(b []byte, e *event.Event) []byte
	// End is what comes after it.
	End []byte
}

// frame builds e's frame in one array, and its envelope as a part of it.
func (f Framing) frame(e *event.Event) (frame, envelope []byte) {
	frame = f.Start(make([]byte, 0, event.EnvelopeBytes(e)+len(e.Type)+len(f.End)), e)
	at := len(frame)
	frame = e.AppendEnvelope(frame)
	end := len(frame)
	frame = append(frame, f.End...)
	return frame, frame[at:end:end]
}

// clock is the time since the router started, in nanoseconds: what an
// item's learned holds (an int64 where a time.Time would take three
// words) and Subscription.Lag compares it with.
func (o *Options) clock() int64 { return int64(time.Since(o.started)) }
