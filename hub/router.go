package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/edgehub/edgehub/actors"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/metrics"
	"github.com/edgehub/edgehub/spool"
)

// ErrUnavailable answers a request the hub could not serve: the backlog
// could not be read, or the commit failed.
var ErrUnavailable = errors.New("topic unavailable")

// Options are what every hub and subscription needs from the process.
type Options struct {
	// Log is where heads, catch-up pages and snapshots are read.
	Log backlog.Log
	// Committer commits publishes, many at a time.
	Committer *backlog.Committer
	// Logger takes what a hub cannot answer for (a head it cannot read).
	Logger *slog.Logger
	// Metrics counts demotions (nil: a registry of the router's own).
	Metrics *metrics.Metrics
	// ReadBudget bounds the bytes of catch-up pages, snapshots, live
	// queues and live frames that all subscriptions hold in memory at
	// once, in all and per tenant; SpoolBudget the bytes of snapshots kept
	// on disk (in SpoolDir, or the system's temporary directory if empty)
	// until they are written. Nil leaves them unbounded.
	ReadBudget, SpoolBudget *limits.Budget
	SpoolDir                string
	// Framing, if set, frames every live event once for all the streams
	// that write frames by reference (Subscription.NextFrames).
	Framing Framing
	// StreamBuffer is how many bytes of envelopes a live stream may have
	// queued before the hub sends it back to read from the backlog.
	StreamBuffer int
	// PageSize is how many events a catching-up stream reads at a time
	// (default 1000); tests make it small to hold a stream between pages.
	PageSize int
	// RecentEvents is how many of its newest commits a hub keeps, so that
	// a stream a little behind joins without reading the backlog (0: 1024;
	// negative: none). RecentBudget bounds their bytes across all hubs
	// (nil: unbounded).
	RecentEvents int
	RecentBudget *limits.Budget
	// RetentionEvents and RetentionAge are the backlog's retention: the
	// recent commits never hold an event that retention may have removed
	// from the log, so a stream behind still gets its gap.
	RetentionEvents int64
	RetentionAge    time.Duration
	// IdleTicks is how many manager ticks with no stream and no publish in
	// flight make a hub report idle.
	IdleTicks int
	// CheckTicks is how often, in ticks, a hub with live streams compares
	// its head with the log's, catching a commit notice that never came.
	CheckTicks int
	// Hearing says whether the process hears the hints of the other
	// processes sharing its log (nil: it always does, as the only process
	// on its log).
	Hearing *Hearing
	// Manager tunes the actor manager that owns the hubs.
	Manager actors.Options
	// Hooks are for tests; zero in production.
	Hooks Hooks

	root    *actor.RootContext // set by NewRouter
	started time.Time          // when NewRouter ran: the start of clock
	faults  faultHooks         // injected bugs; empty unless built with -tags faults
	// committed passes each commit of this process's to its tenant's
	// hub (Router.committedTenant); set by NewRouter.
	committed func(tenant, topic string, events []event.Event)
}

// Hooks let tests hold a hub or a subscription inside a race window. Nil
// in production.
type Hooks struct {
	// BeforeIdle runs inside Receive just before a hub reports idle.
	BeforeIdle func(key string)
	// AfterSnapshot runs after a snapshot stream has read the state and
	// before it registers with its hub.
	AfterSnapshot func(tenant, topic string)
	// BetweenPages runs after a catching-up subscription has handed out a
	// page (and its writer has written it) and before it reads the next.
	BetweenPages func(tenant, topic string)
	// AfterGoLive runs after a caught-up subscription has asked its hub to
	// go live and before it waits for the answer.
	AfterGoLive func(tenant, topic string)
	// HeadRead runs inside Receive once a hub has applied a head it read.
	HeadRead func(key string)
	// BetweenTenantPages runs before a catching-up tenant subscription
	// reads a page of the log (after it has handed out the one before).
	BetweenTenantPages func(tenant string)
	// AfterTenantGoLive runs after a caught-up tenant subscription has
	// asked its tenant hub to go live and before it waits for the answer.
	AfterTenantGoLive func(tenant string)
}

// Router is the typed way into the hubs: a transport publishes and
// watches through it and never sees an actor.
type Router struct {
	opts    *Options        // shared by every hub and subscription; read-only
	manager *actors.Manager // owns one hub per topic
	tenants *actors.Manager // owns one tenant hub per tenant with tenant streams

	watchedMu  sync.Mutex
	watched    map[string]int // tenant streams open, by tenant
	watchedAll atomic.Int64   // in all, changed under watchedMu
}

// Key is the manager key of a topic. A tenant's name cannot hold '/' (a
// topic's may), so the key's first '/' ends the tenant and the key is
// unambiguous; parseKey is its inverse.
func Key(tenant, topic string) string { return tenant + "/" + topic }

func parseKey(key string) (tenant, topic string) {
	tenant, topic, _ = strings.Cut(key, "/")
	return tenant, topic
}

// NewRouter starts the manager that owns one hub per topic.
func NewRouter(system *actor.ActorSystem, opts Options) (*Router, error) {
	o := opts
	o.root = system.Root
	o.started = time.Now()
	o.faults = injectedFaults()
	if o.PageSize <= 0 {
		o.PageSize = 1000
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	if o.ReadBudget == nil {
		o.ReadBudget = limits.NewBudget(0, 0, "read answers")
	}
	if o.SpoolBudget == nil {
		o.SpoolBudget = limits.NewBudget(0, 0, "read answers kept on disk")
	}
	if o.RecentEvents == 0 {
		o.RecentEvents = 1024
	}
	if o.RetentionEvents > 0 && int64(o.RecentEvents) > o.RetentionEvents {
		o.RecentEvents = int(o.RetentionEvents)
	}
	if o.RecentBudget == nil {
		o.RecentBudget = limits.NewBudget(0, 0, "recent events")
	}
	if o.Hearing == nil {
		o.Hearing = &Hearing{}
		o.Hearing.Set(true)
	}
	r := &Router{opts: &o, watched: map[string]int{}}
	o.committed = r.committedTenant
	tm, err := actors.NewManager(system, "tenants", func(key string) *actor.Props {
		tenant := strings.TrimSuffix(key, "/")
		return actor.PropsFromProducer(func() actor.Actor { return newTenantHub(tenant, &o) })
	}, o.Manager)
	if err != nil {
		return nil, fmt.Errorf("start tenant hub manager: %w", err)
	}
	r.tenants = tm
	m, err := actors.NewManager(system, "hubs", func(key string) *actor.Props {
		tenant, topic := parseKey(key)
		return actor.PropsFromProducer(func() actor.Actor {
			return &hub{tenant: tenant, topic: topic, opts: &o, live: newStreamSet[*stream](o.Metrics.StreamsLive), catchingUp: newStreamSet[*stream](o.Metrics.StreamsCatchingUp),
				recent: recent{limit: o.RecentEvents, budget: o.RecentBudget}}
		})
	}, o.Manager)
	if err != nil {
		tm.Stop()
		return nil, fmt.Errorf("start hub manager: %w", err)
	}
	r.manager = m
	return r, nil
}

// Publication is a publish handed to its hub. The commit goes on whatever
// the caller does next, and its one answer always comes.
type Publication struct {
	reply chan publishReply
}

// Publish hands req to its topic's hub, which commits it with others and
// answers once it is durable and fanned out.
func (r *Router) Publish(req *backlog.Publish) *Publication {
	p := &Publication{reply: make(chan publishReply, 1)}
	msg := &publish{req: req, reply: p.reply}
	if r.opts.faults.publish != nil {
		r.opts.faults.publish(r, msg)
		return p
	}
	r.manager.Send(Key(req.Tenant, req.Topic), msg)
	return p
}

// Wait returns the publish's outcome once its commit is done: the result
// (a duplicate's too), or the refusal of the commit (backlog.ErrNoTenant,
// ErrKeyReused, ErrQuota), or ErrUnavailable if the commit failed. If ctx
// ends first it returns ctx.Err() and the commit goes on; Wait may be
// called again until it returns the outcome.
func (p *Publication) Wait(ctx context.Context) (backlog.Result, error) {
	select {
	case rep := <-p.reply:
		if rep.err != nil {
			return rep.result, fmt.Errorf("%w: %w", ErrUnavailable, rep.err)
		}
		return rep.result, rep.result.Err
	case <-ctx.Done():
		return backlog.Result{}, ctx.Err()
	}
}

// From is where a watch starts.
type From struct {
	// After is the position: every event after it is delivered.
	After int64
	// Now starts at the head instead, as it is when the stream registers.
	Now bool
	// Snapshot, for a stream that starts now, starts it at a read of the
	// topic's state instead, handed out first. A stream with a position
	// has the state already and gets none.
	Snapshot bool
}

// Watch registers a stream with its topic's hub and returns its
// subscription once it is registered: only then may the transport tell
// its client that it is subscribed. A snapshot is read into a spool,
// its piece in memory from the tenant's share of the read budget and the
// rest on disk from its share of the spool budget (the error wraps the
// *refusal.Error if they are not free now), held until the first Next
// after it is written.
func (r *Router) Watch(ctx context.Context, tenant, topic string, from From) (*Subscription, error) {
	sub := &Subscription{router: r, tenant: tenant, topic: topic, hold: r.opts.ReadBudget.Hold(tenant),
		disk: r.opts.SpoolBudget.Hold(tenant), frames: r.opts.ReadBudget.Hold(tenant)}
	if from.Snapshot && from.Now {
		snap := &Snapshot{Spool: spool.New(r.opts.SpoolDir, sub.hold.Try, sub.disk.Try)}
		seq, err := r.opts.Log.State(ctx, tenant, topic, snap)
		if err == nil {
			err = snap.Done()
		}
		sub.snapshot = snap
		if err != nil {
			sub.hold.Release()
			sub.dropSnapshot()
			return nil, fmt.Errorf("snapshot of %s/%s: %w", tenant, topic, err)
		}
		snap.Seq = seq
		from = From{After: seq}
		if r.opts.Hooks.AfterSnapshot != nil {
			r.opts.Hooks.AfterSnapshot(tenant, topic)
		}
	}
	sub.stream = newStream(r.opts.StreamBuffer)
	sub.stream.overflow = r.opts.faults.overflow
	reply := make(chan joined, 1)
	r.manager.Send(Key(tenant, topic), &watch{stream: sub.stream, position: from.After, fromNow: from.Now, reply: reply})
	var j joined
	select {
	case j = <-reply:
	case <-ctx.Done():
		sub.hold.Release()
		sub.dropSnapshot()
		// The hub registers the stream anyway; take it out once it has.
		go func() {
			if j := <-reply; j.err == nil {
				r.opts.root.Send(j.hub, &unwatch{stream: sub.stream})
			}
		}()
		return nil, ctx.Err()
	}
	if j.err != nil {
		sub.hold.Release()
		sub.dropSnapshot()
		return nil, j.err
	}
	sub.hub, sub.head, sub.position, sub.live, sub.until, sub.freshAfter = j.hub, j.head, j.position, j.live, j.until, j.head
	if sub.snapshot != nil {
		// The hub's head may trail the snapshot's read: the commit notice
		// can be on its way. Hello never reports a head below it.
		sub.head = max(sub.head, sub.snapshot.Seq)
	}
	if !sub.live || sub.snapshot != nil {
		sub.stream.signal() // Next has a page to read, or a snapshot to give back
	}
	return sub, nil
}

// EndTenant ends every stream of the tenant and stops its hubs, after the
// publishes already routed to them; the next message for one of its
// topics starts a new hub, which hears of those commits even if it read
// its head before they landed (hub.applyOwn). Deleting or rotating a
// tenant calls it.
func (r *Router) EndTenant(tenant string) {
	r.manager.StopPrefix(Key(tenant, ""))
	r.tenants.StopPrefix(tenantKey(tenant))
}

// Remote passes on a hint that another process sharing the log committed
// first..last of a topic, to its hub if one is running: a hub started
// later reads its head from the log.
func (r *Router) Remote(tenant, topic string, first, last int64) {
	r.manager.Notify(Key(tenant, topic), &remoteCommit{first: first, last: last})
	if r.tenantWatched(tenant) {
		r.tenants.Notify(tenantKey(tenant), &tenantHint{})
	}
}

// EndAll ends every stream and stops every hub, as EndTenant does for one
// tenant: after hints may have been lost (a listener that lost its
// connection), one of them may have been a tenant's end, which only the
// credentials check of a new stream enforces, or a head that a hub keeps
// no more. Clients reconnect with Last-Event-ID; new hubs read their heads.
func (r *Router) EndAll() {
	r.manager.StopPrefix("")
	r.tenants.StopPrefix("")
}

// Tick advances the hubs' clock by one tick (idleness, head checks), for
// owners that run no ticker.
func (r *Router) Tick() {
	r.manager.Tick()
	r.tenants.Tick()
}

// Stop stops every hub, ending their streams, after the messages already
// routed to them.
func (r *Router) Stop() {
	r.manager.Stop()
	r.tenants.Stop()
}
