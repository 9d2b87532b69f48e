package hub

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/edgehub/edgehub/actors"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
)

// A tenant hub is the join protocol of hub.go one level up (plan 039): the
// tenant's position plays the part of a topic's sequence. It runs while
// tenant streams of its tenant are open here, hears every commit of the
// tenant (its own process's from the committer, the others' as hints that
// send it to the log), applies them in position order, and pushes each
// event to the live streams it matches, found through an index: exact
// topics by name, patterns tested once per topic and remembered. A stream
// behind the head reads the log by position (TenantSubscription) and asks
// to go live at its position; the hub takes it live only if that position
// is its head (or beyond it), in the same turn.

// Selection is what a tenant stream asks for (packages selector and
// mercure build it): exact topics, which the hub indexes by name, and
// patterns, which it tests once per topic; a native selection takes an
// event by its own topic, a Mercure one by any of an update's topics,
// and announcements only as backlog.Selects says. The native selection
// is narrowed by the token's grants already; Mercure's encoder withholds
// what its subscriber may not see.
type Selection interface {
	backlog.TenantSelection
	Exact() []string
	Patterned() bool
	MatchPattern(topic string) bool
	// PatternKey is the same for two selections whose MatchPattern
	// answers alike for every topic, so that one test serves both.
	PatternKey() string
	// AnnouncementKey is the same for two selections whose
	// MatchAnnouncement answers alike for every topic; empty for one
	// that no announcement is tried against (a native selection, which
	// takes them by their own topic, or a Mercure one that takes none).
	AnnouncementKey() string
}

type (
	// tenantWatch registers a tenant stream after position, or at the
	// head if fromNow; reply (capacity 1) gets the head and position.
	tenantWatch struct {
		stream   *tstream
		position int64
		fromNow  bool
		reply    chan<- tenantJoined
	}
	tenantJoined struct {
		head, position int64
		live           bool
		hub            *actor.PID
		err            error
	}
	// tenantGoLive asks, for a stream that has handed out everything up
	// to position from the log, to join the live set.
	tenantGoLive struct {
		stream   *tstream
		position int64
		reply    chan<- tenantLive
	}
	tenantLive struct{ live bool }
	// tenantUnwatch removes a stream whose client has gone.
	tenantUnwatch struct{ stream *tstream }
	// tenantCommit is a commit of this process's, one topic's events in
	// position order, encoded in the committer's goroutine.
	tenantCommit struct{ items []*titem }
	// tenantHint says the log may hold positions the hub has not heard
	// of: another process committed some.
	tenantHint struct{}
	// tenantRead is a read of the log after the hub's head (the head
	// alone, when the hub starts).
	tenantRead struct {
		page  backlog.TenantPage
		items []*titem
		err   error
		first bool
	}
)

func (*tenantCommit) IgnoreDeadLetterLogging()  {}
func (*tenantHint) IgnoreDeadLetterLogging()    {}
func (*tenantRead) IgnoreDeadLetterLogging()    {}
func (*tenantGoLive) IgnoreDeadLetterLogging()  {}
func (*tenantUnwatch) IgnoreDeadLetterLogging() {}

// maxTenantAhead and maxTenantAheadBytes bound the own commits a tenant
// hub holds while a commit before them (another topic's, or another
// process's) is on its way; past them, the live streams read the log
// instead.
const (
	maxTenantAhead      = 256
	maxTenantAheadBytes = 4 << 20
)

// tenantHub is the actor of one tenant's order. All its fields are owned
// by its Receive.
type tenantHub struct {
	tenant string
	opts   *Options

	// head is the newest position whose event (if its topic matched)
	// every live stream has been given.
	head            int64
	loaded, loading bool
	waiting         []*tenantWatch

	// live streams are at the head and pushed to; catchingUp ones read
	// the log.
	live, catchingUp streamSet[*tstream]
	// native and mercure index the live streams (tenant_index.go): a
	// native stream is found by an event's own topic only, a Mercure one
	// by any of its topics. announced groups the Mercure streams that
	// announcements are tried against, by AnnouncementKey; they are
	// tried against no other stream.
	native, mercure topicIndex
	announced       map[string]*patternGroup

	// ahead holds own commits that do not follow head yet, by first
	// position; aheadBytes is their envelopes' bytes.
	ahead      map[int64][]*titem
	aheadBytes int
	// behind says the log may hold positions after head: a read is due.
	// reading says one is in flight.
	behind, reading bool

	idle  actors.Idleness
	ticks int
}

func newTenantHub(tenant string, opts *Options) *tenantHub {
	return &tenantHub{tenant: tenant, opts: opts,
		live:       newStreamSet[*tstream](opts.Metrics.StreamsLive),
		catchingUp: newStreamSet[*tstream](opts.Metrics.StreamsCatchingUp),
		native:     newTopicIndex(), mercure: newTopicIndex(), announced: map[string]*patternGroup{},
		ahead: map[int64][]*titem{}}
}

func (h *tenantHub) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actors.Envelope:
		h.idle.Handled()
		w, ok := msg.Msg.(*tenantWatch)
		if !ok {
			return
		}
		if h.loaded && h.live.len()+h.catchingUp.len() == 0 {
			// With no stream here, the router passed on no commit of the
			// tenant (Router.committedTenant): the head is stale, and
			// what was held for it is too.
			h.loaded = false
			clear(h.ahead)
			h.aheadBytes = 0
		}
		if !h.loaded {
			h.waiting = append(h.waiting, w)
			h.read(ctx, true)
			return
		}
		h.watch(ctx, w)
	case *tenantGoLive:
		msg.reply <- tenantLive{live: h.goLive(msg.stream, msg.position)}
	case *tenantUnwatch:
		h.removeLive(msg.stream)
		h.catchingUp.remove(msg.stream)
	case *tenantCommit:
		h.own(ctx, msg.items)
	case *tenantHint:
		h.behind = true
		h.read(ctx, false)
	case *tenantRead:
		h.readDone(ctx, msg)
	case actors.Retire:
		h.endAll()
		ctx.Stop(ctx.Self())
	case actors.Tick:
		h.tick(ctx)
	case *actor.Stopping:
		h.endAll()
		for _, w := range h.waiting {
			w.reply <- tenantJoined{err: ErrUnavailable}
		}
		h.waiting = nil
	}
}

func (h *tenantHub) watch(ctx actor.Context, w *tenantWatch) {
	position := w.position
	if w.fromNow {
		position = h.head
	}
	live := position >= h.head
	if live {
		w.stream.arm(position)
		h.addLive(w.stream)
	} else {
		h.catchingUp.add(w.stream)
	}
	w.reply <- tenantJoined{head: h.head, position: position, live: live, hub: ctx.Self()}
}

// goLive is the decision the tenant join turns on: a catching-up stream
// that has handed out everything up to position joins the live set in
// this turn only if position is the head (or beyond it: the log was
// ahead of the hub, and what comes up to position is not pushed to it);
// otherwise it reads more. What was committed while it caught up is in
// the log.
func (h *tenantHub) goLive(s *tstream, position int64) bool {
	if position < h.head {
		return false
	}
	switch {
	case h.catchingUp.has(s):
		h.catchingUp.remove(s)
	case !h.live.has(s):
		return false // ended, or its client left
	default:
		h.removeLive(s)
	}
	s.arm(position)
	h.addLive(s)
	return true
}

func (h *tenantHub) addLive(s *tstream) {
	h.live.add(s)
	h.indexOf(s).add(s)
	if k := s.sel.AnnouncementKey(); k != "" {
		g := h.announced[k]
		if g == nil {
			g = &patternGroup{sel: s.sel, streams: map[*tstream]struct{}{}}
			h.announced[k] = g
		}
		g.streams[s] = struct{}{}
	}
}

func (h *tenantHub) removeLive(s *tstream) {
	if !h.live.has(s) {
		return
	}
	h.live.remove(s)
	h.indexOf(s).remove(s)
	if k := s.sel.AnnouncementKey(); k != "" {
		if g := h.announced[k]; g != nil {
			if delete(g.streams, s); len(g.streams) == 0 {
				delete(h.announced, k)
			}
		}
	}
}

// indexOf is the index of the stream's kind.
func (h *tenantHub) indexOf(s *tstream) *topicIndex {
	if s.sel.ByOthers() {
		return &h.mercure
	}
	return &h.native
}

// own applies a commit of this process's: at once if it follows the head,
// else it waits in ahead while the hub reads the log for what comes
// between (another topic's commit on its way, or another process's), or
// while the hub reads its head.
func (h *tenantHub) own(ctx actor.Context, items []*titem) {
	first, last := items[0].Pos, items[len(items)-1].Pos
	switch {
	case h.loaded && last <= h.head:
	case h.loaded && first == h.head+1:
		h.apply(items)
		h.applyAhead()
	default:
		h.holdAhead(items)
		h.behind = true
		h.read(ctx, false)
	}
}

// holdAhead keeps a commit that does not follow the head, within bounds;
// past them it is let go: the log holds it, and the read that behind asks
// for brings it.
func (h *tenantHub) holdAhead(items []*titem) {
	size := envelopeBytes(items)
	if len(h.ahead) >= maxTenantAhead || h.aheadBytes+size > maxTenantAheadBytes {
		return
	}
	h.ahead[items[0].Pos] = items
	h.aheadBytes += size
}

func (h *tenantHub) dropAhead(first int64) {
	h.aheadBytes -= envelopeBytes(h.ahead[first])
	delete(h.ahead, first)
}

func envelopeBytes(items []*titem) (n int) {
	for _, it := range items {
		n += len(it.Envelope)
	}
	return n
}

// applyAhead applies the own commits that follow the head now, and drops
// those at or below it.
func (h *tenantHub) applyAhead() {
	for first, items := range h.ahead {
		if items[len(items)-1].Pos <= h.head {
			h.dropAhead(first)
		}
	}
	for {
		items, ok := h.ahead[h.head+1]
		if !ok {
			return
		}
		h.dropAhead(h.head + 1)
		h.apply(items)
	}
}

// apply advances the head over items, which follow it, and pushes each to
// the live streams that select it (backlog.Selects, through the index); a
// stream whose queue is full goes back to the log.
func (h *tenantHub) apply(items []*titem) {
	h.head = items[len(items)-1].Pos
	topic := items[0].Topic // a commit is one topic's
	if slices.ContainsFunc(items, func(it *titem) bool { return len(it.Others()) > 0 }) {
		h.applyEach(topic, items)
		return
	}
	// Every item is selected by its topic alone, the same for all. A
	// stream both named and matched comes twice: its second offer finds
	// the items queued already.
	var to []*tstream
	add := func(s *tstream) { to = append(to, s) }
	h.native.each(topic, add)
	h.mercure.each(topic, add)
	if len(to) == 0 {
		return
	}
	h.deliver(items, to, func(*tstream) []*titem { return items })
}

// applyEach pushes a commit whose events have other topics (Mercure
// updates, announcements), each to the streams that select it: the
// native ones by the commit's topic, the Mercure ones by any topic of an
// update, and an announcement only to the groups it is tried against.
func (h *tenantHub) applyEach(topic string, items []*titem) {
	var native []*tstream
	h.native.each(topic, func(s *tstream) { native = append(native, s) })
	var to []*tstream
	given := map[*tstream][]*titem{}
	give := func(it *titem) func(*tstream) {
		return func(s *tstream) {
			got, ok := given[s]
			if !ok {
				to = append(to, s)
			}
			if len(got) == 0 || got[len(got)-1] != it {
				given[s] = append(got, it)
			}
		}
	}
	for _, it := range items {
		f := give(it)
		for _, s := range native {
			f(s)
		}
		if it.Announcement() {
			for _, g := range h.announced {
				if g.sel.MatchAnnouncement(topic) || slices.ContainsFunc(it.Others(), g.sel.MatchAnnouncement) {
					for s := range g.streams {
						f(s)
					}
				}
			}
			continue
		}
		h.mercure.each(topic, f)
		for _, other := range it.Others() {
			h.mercure.each(other, f)
		}
	}
	if len(to) == 0 {
		return
	}
	h.deliver(items, to, func(s *tstream) []*titem { return given[s] })
}

// deliver offers each of the streams to its part of items (what items
// gives it), all of them pinned while it does; a stream no longer live
// (demoted by an offer before) is passed over.
func (h *tenantHub) deliver(all []*titem, to []*tstream, items func(*tstream) []*titem) {
	if !h.pin(all) {
		// No room in the read budget: the streams that would hold them
		// read them from the log, waiting for room as catching-up ones do.
		for _, s := range to {
			if h.live.has(s) {
				s.demote()
				h.demote(s)
			}
		}
		return
	}
	for _, s := range to {
		if h.live.has(s) {
			h.offer(s, items(s))
		}
	}
	h.opts.ReadBudget.Shrink(h.tenant, releaseT(all))
}

// pin takes a reference to each of items for the hub while it offers
// them, and the bytes of those that nothing held from the tenant's share
// of the read budget; it takes nothing and says false when there is no
// room.
func (h *tenantHub) pin(items []*titem) bool {
	var n int64
	for _, it := range items {
		if it.refs.Add(1) == 1 {
			n += int64(len(it.Envelope))
		}
	}
	if h.opts.ReadBudget.Grow(h.tenant, n) {
		return true
	}
	for _, it := range items {
		it.refs.Add(-1) // only the hub adds references: nothing is freed
	}
	return false
}

func (h *tenantHub) offer(s *tstream, items []*titem) {
	if !s.offer(items) {
		h.demote(s)
	}
}

func (h *tenantHub) demote(s *tstream) {
	h.removeLive(s)
	h.catchingUp.add(s)
	h.opts.Metrics.Demotions.Inc()
}

// skipTo moves the head past positions the hub cannot push in order:
// every live stream reads the log, which holds them (or says what
// retention removed).
func (h *tenantHub) skipTo(head int64) {
	if head <= h.head {
		return
	}
	h.head = head
	for s := range h.live.m {
		s.demote()
		h.demote(s)
	}
	h.applyAhead()
}

func (h *tenantHub) endAll() {
	for _, set := range []streamSet[*tstream]{h.live, h.catchingUp} {
		for s := range set.m {
			s.end()
		}
		set.clear()
	}
	h.native.clear()
	h.mercure.clear()
	clear(h.announced)
}

// tick reads the log after the head now and then while streams are live,
// catching a hint that never came, and runs the passivation clock.
func (h *tenantHub) tick(ctx actor.Context) {
	h.ticks++
	if h.opts.CheckTicks > 0 && h.ticks%h.opts.CheckTicks == 0 && h.live.len() > 0 {
		h.behind = true
	}
	h.read(ctx, false)
	busy := h.loading || h.reading || h.live.len()+h.catchingUp.len() > 0 || len(h.waiting) > 0
	if h.idle.Tick(busy, h.opts.IdleTicks) {
		h.idle.Report(ctx, tenantKey(h.tenant))
	}
}

// tenantReadBytes bounds one read of the log after the hub's head.
const tenantReadBytes = 256 << 10

// read reads the log in a goroutine: the head alone when the hub starts
// (first), else the events after the head, if behind says some may be
// there. One read is in flight at a time.
func (h *tenantHub) read(ctx actor.Context, first bool) {
	if first {
		if h.loading {
			return
		}
		h.loading = true
	} else {
		if h.reading || h.loading || !h.loaded || !h.behind {
			return
		}
		h.reading, h.behind = true, false
	}
	self, opts, tenant, after := ctx.Self(), h.opts, h.tenant, h.head
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if first {
			head, err := opts.Log.TenantHead(c, tenant)
			opts.root.Send(self, &tenantRead{page: backlog.TenantPage{Head: head}, err: err, first: true})
			return
		}
		release, refused := opts.ReadBudget.TryTake(tenant, 2*tenantReadBytes)
		if refused != nil {
			opts.root.Send(self, &tenantRead{err: refused})
			return
		}
		defer release()
		every := backlog.TopicMatch(func(string) bool { return true })
		page, err := opts.Log.ReadTenant(c, tenant, after, every, opts.PageSize, tenantReadBytes)
		opts.root.Send(self, &tenantRead{page: page, items: tenantItems(page.Events, opts.clock()), err: err})
	}()
}

func (h *tenantHub) readDone(ctx actor.Context, msg *tenantRead) {
	if msg.first {
		h.loading = false
		if msg.err != nil {
			h.opts.Logger.Error("read the tenant's head", "tenant", h.tenant, "err", msg.err)
			for _, w := range h.waiting {
				w.reply <- tenantJoined{err: ErrUnavailable}
			}
			h.waiting = nil
			return
		}
		h.head, h.loaded = max(h.head, msg.page.Head), true
		for _, w := range h.waiting {
			h.watch(ctx, w)
		}
		h.waiting = nil
		h.applyAhead()
		if len(h.ahead) > 0 {
			h.behind = true
		}
		h.read(ctx, false)
		return
	}
	h.reading = false
	if !h.loaded {
		return // the head is being read again: what this read brings is in it
	}
	if msg.err != nil {
		h.behind = true // again at the next tick
		h.opts.Logger.Warn("read the tenant's order; trying again", "tenant", h.tenant, "err", msg.err)
		return
	}
	if msg.page.Next > h.head {
		if contiguous(h.head, &msg.page) {
			for i := 0; i < len(msg.items); {
				j := i + 1
				for j < len(msg.items) && msg.items[j].Topic == msg.items[i].Topic {
					j++
				}
				h.apply(msg.items[i:j])
				i = j
			}
		} else {
			h.skipTo(msg.page.Next)
		}
		h.applyAhead()
	}
	if msg.page.Next < msg.page.Head || len(h.ahead) > 0 {
		h.behind = true
	}
	h.read(ctx, false)
}

// contiguous says a read after head holds every position up to its Next,
// none removed: its events can be pushed as commits are.
func contiguous(head int64, p *backlog.TenantPage) bool {
	if len(p.Gaps) > 0 || int64(len(p.Events)) != p.Next-head {
		return false
	}
	for i := range p.Events {
		if p.Events[i].Pos != head+int64(i)+1 {
			return false
		}
	}
	return true
}

// titem is an event of a tenant's order with its tenant envelope encoded
// once for every tenant stream that is sent it.
type titem struct {
	event.OfTenant
	Envelope []byte
	learned  int64
	// refs counts the live queues (and the hub, while it offers the item)
	// that hold it: while there is one, its envelope's bytes are taken,
	// once, from the tenant's share of the read budget, as a topic's
	// live items are (item.refs).
	refs atomic.Int32
}

// releaseT lets go of one reference to each of items and returns the
// bytes of those that nothing holds any more.
func releaseT(items []*titem) (freed int64) {
	for _, it := range items {
		if it.refs.Add(-1) == 0 {
			freed += int64(len(it.Envelope))
		}
	}
	return freed
}

func tenantItems(events []event.OfTenant, learned int64) []*titem {
	items := make([]*titem, len(events))
	for i := range events {
		it := &titem{OfTenant: events[i], learned: learned}
		it.Envelope = it.AppendEnvelope(nil)
		items[i] = it
	}
	return items
}

// tenantKey is a tenant hub's manager key: with its '/', a prefix stop
// of one tenant's key stops no other tenant's hub.
func tenantKey(tenant string) string { return tenant + "/" }
