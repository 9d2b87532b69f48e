// Package actors is the runtime part of Edgehub: Cloudflare's Durable
// Objects ported onto protoactor-go. A Manager owns one actor per key,
// starts it on the first message for that key and passivates it when it
// reports idle, without losing or misrouting a message that arrives while
// it stops. It knows nothing of topics or SSE.
package actors

import (
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Envelope carries a routed message to a keyed actor. The actor counts the
// envelopes it handles and reports that count when idle: that is how the
// manager knows no message is on its way to an actor it is about to stop.
type Envelope struct {
	Msg any
}

// IgnoreDeadLetterLogging keeps a routed message that meets a stopped
// actor out of protoactor's dead-letter log: it may carry user data.
func (*Envelope) IgnoreDeadLetterLogging() {}

// IgnoreDeadLetterLogging: a tick to an actor that just stopped is expected.
func (Tick) IgnoreDeadLetterLogging() {}

// Tick is sent to every keyed actor on each manager tick; actors use it to
// time their idleness (SetReceiveTimeout races under -race upstream).
type Tick struct{}

// Idle is what a keyed actor sends to its parent, with ctx.Request so that
// the sender is set, when it has had nothing to do for a while. Handled is
// the number of envelopes it has handled.
type Idle struct {
	Key     string
	Handled uint64
}

// Options tune a Manager.
type Options struct {
	// TickInterval is how often Tick goes to every actor; zero starts no
	// ticker, and the owner calls Manager.Tick itself (tests do).
	TickInterval time.Duration
	// OnIdle, when set, runs inside the manager's Receive when an Idle
	// report arrives, before it is acted on. Tests use it to hold the
	// manager in the passivation window; it must not block otherwise.
	OnIdle func(key string)
	// OnCount, when set, is told the number of live keyed actors whenever
	// it changes.
	OnCount func(n int)
	// OnPassivate, when set, is told each time the manager stops an actor
	// because it reported idle (not when a Retire or a failure stops one).
	OnPassivate func()
}

// Manager routes messages to keyed actors.
type Manager struct {
	root *actor.RootContext
	pid  *actor.PID
	stop chan struct{}
}

type deliver struct {
	key string
	msg any
}

type tick struct{}

// notice is a message for a keyed actor only if it is running.
type notice deliver

type stopPrefix string

// NewManager spawns the manager actor under name. props builds the actor
// for a key; it is called once per incarnation.
func NewManager(system *actor.ActorSystem, name string, props func(key string) *actor.Props, opts Options) (*Manager, error) {
	m := &Manager{root: system.Root, stop: make(chan struct{})}
	pid, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		return &manager{props: props, opts: opts, children: map[string]*child{}}
	}, actor.WithSupervisor(stopOnFailure())), name)
	if err != nil {
		return nil, err
	}
	m.pid = pid
	if opts.TickInterval > 0 {
		go m.ticker(opts.TickInterval)
	}
	return m, nil
}

// Send routes msg to the actor for key. It never blocks.
func (m *Manager) Send(key string, msg any) {
	m.root.Send(m.pid, &deliver{key: key, msg: msg})
}

// Notify sends msg to the actor for key if one is running, and drops it
// otherwise: news that only a running actor needs (one starting afresh
// reads the truth itself) and that must not start one. msg reaches the
// actor as it is, not in an Envelope, so it does not count as work that
// keeps the actor from passivating. It never blocks.
func (m *Manager) Notify(key string, msg any) {
	m.root.Send(m.pid, &notice{key: key, msg: msg})
}

// NotifyFrom is Notify from inside a keyed actor, whose parent is its
// manager: an actor that was retired, and finishes what it had in flight,
// tells the actor that now runs under its key (if one does) what it
// learned too late to act on itself.
func NotifyFrom(ctx actor.Context, key string, msg any) {
	ctx.Send(ctx.Parent(), &notice{key: key, msg: msg})
}

// Retire tells a keyed actor that nothing more will be routed to it: it
// should finish what it has in flight and then stop itself.
type Retire struct{}

// StopPrefix retires every keyed actor whose key starts with prefix, after
// the messages already routed to it; the next message for such a key
// starts a new one.
func (m *Manager) StopPrefix(prefix string) {
	m.root.Send(m.pid, stopPrefix(prefix))
}

// Tick sends one Tick to every keyed actor.
func (m *Manager) Tick() {
	m.root.Send(m.pid, tick{})
}

// Stop stops the ticker and the manager with every keyed actor, after the
// messages already queued for the manager.
func (m *Manager) Stop() {
	close(m.stop)
	m.root.PoisonFuture(m.pid).Wait() //nolint:errcheck // a timeout means it is gone already
}

func (m *Manager) ticker(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			m.Tick()
		case <-m.stop:
			return
		}
	}
}

// stopOnFailure stops a failing actor rather than restarting it: a keyed
// actor's state (its streams) does not survive a restart, so it is better
// that it stops, ends its streams, and is started afresh on the next
// message.
func stopOnFailure() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })
}

type child struct {
	key  string
	pid  *actor.PID
	sent uint64
}

type manager struct {
	props    func(key string) *actor.Props
	opts     Options
	children map[string]*child
	byID     map[string]*child
	next     uint64
}

func (m *manager) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *deliver:
		c := m.children[msg.key]
		if c == nil {
			c = m.spawn(ctx, msg.key)
		}
		c.sent++
		ctx.Send(c.pid, &Envelope{Msg: msg.msg})
	case *notice:
		if c := m.children[msg.key]; c != nil {
			ctx.Send(c.pid, msg.msg)
		}
	case tick:
		for _, c := range m.children {
			ctx.Send(c.pid, Tick{})
		}
	case stopPrefix:
		for key, c := range m.children {
			if strings.HasPrefix(key, string(msg)) {
				m.remove(c)
				ctx.Send(c.pid, Retire{})
			}
		}
	case *Idle:
		if m.opts.OnIdle != nil {
			m.opts.OnIdle(msg.Key)
		}
		c := m.children[msg.Key]
		// A report from an older incarnation, or one overtaken by a message
		// routed after it was sent, does not count: the actor has work.
		if c == nil || !c.pid.Equal(ctx.Sender()) || c.sent != msg.Handled {
			return
		}
		m.remove(c)
		ctx.Poison(c.pid)
		if m.opts.OnPassivate != nil {
			m.opts.OnPassivate()
		}
	case *actor.Terminated:
		if c := m.byID[msg.Who.Id]; c != nil && m.children[c.key] == c {
			m.remove(c)
		}
	}
}

func (m *manager) spawn(ctx actor.Context, key string) *child {
	m.next++
	// A name per incarnation: the stopping one and its successor never
	// share a PID, so a late message to the old one cannot reach the new.
	pid := ctx.SpawnPrefix(m.props(key), "k"+strconv.FormatUint(m.next, 36))
	c := &child{key: key, pid: pid}
	m.children[key] = c
	if m.byID == nil {
		m.byID = map[string]*child{}
	}
	m.byID[pid.Id] = c
	m.count()
	return c
}

func (m *manager) remove(c *child) {
	delete(m.children, c.key)
	delete(m.byID, c.pid.Id)
	m.count()
}

func (m *manager) count() {
	if m.opts.OnCount != nil {
		m.opts.OnCount(len(m.children))
	}
}

// Idleness is a keyed actor's half of passivation, kept beside the
// manager's half: it counts the envelopes the actor has handled and the
// ticks it has had nothing to do, and reports idle with that count, which
// the manager compares with the count it sent.
type Idleness struct {
	handled uint64 // envelopes handled by this incarnation
	ticks   int    // manager ticks in a row with nothing to do
}

// Handled counts one envelope; an actor calls it for each one it receives.
func (i *Idleness) Handled() {
	i.handled++
	i.ticks = 0
}

// Tick counts one manager tick and says whether the actor, not busy, has
// now been idle for after ticks: it should then call Report.
func (i *Idleness) Tick(busy bool, after int) bool {
	if busy {
		i.ticks = 0
		return false
	}
	i.ticks++
	if i.ticks < after {
		return false
	}
	i.ticks = 0
	return true
}

// Report tells the manager that the actor under key is idle.
func (i *Idleness) Report(ctx actor.Context, key string) {
	ctx.Request(ctx.Parent(), &Idle{Key: key, Handled: i.handled})
}
