package mercure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/refusal"
)

// subscriptionsPath is the topic of every subscription event, below
// which each subscription has its own (subscription.ID): the same for
// both hub URLs, which serve one tenant, so that one grant covers them.
const subscriptionsPath = Path + "/subscriptions"

// currentTypes are the current revision's matcher types, as a
// subscription names them; 0.x's topic selectors have none.
var currentTypes = []string{"exact", "urlpattern"}

const (
	// maxAnnounced bounds what one subscriber's announcement stores: its
	// subscriptions' events, ids and payloads. Announcing costs the
	// tenant stored bytes, and a token's subscriber should not make one
	// subscribe cost hundreds of KiB.
	maxAnnounced = 64 << 10
	// maxListed bounds an answer of the subscriptions API (a few MiB):
	// the protocol lets a hub truncate its collections.
	maxListed = 10000
	// leaseFor is how long a process's lease on its subscriptions lasts
	// unrenewed, and renewEvery how often Tend renews it (and ends the
	// subscriptions of processes whose lease expired): a process that
	// dies is announced gone within leaseFor + renewEvery.
	leaseFor   = 20 * time.Second
	renewEvery = 5 * time.Second
	// tellTimeout bounds the commit of a subscription's end, which no
	// request waits for; one that fails is tried again by Tend.
	tellTimeout = 10 * time.Second
	// orphansPerRound bounds the subscriptions one Tend ends.
	orphansPerRound = 1000
)

// subscription is one selector of one subscriber, as the protocol's
// subscription events and API describe it: a current selector by its
// matcher type and pattern, a 0.x topic selector by its topic.
type subscription struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Subscriber string `json:"subscriber"`
	Topic      string `json:"topic,omitempty"`
	Match      string `json:"match,omitempty"`
	MatchType  string `json:"match_type,omitempty"`
	Active     bool   `json:"active"`
	// Payload is the subscriber's token's for this selector, if any.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// subscriptionOf is the subscription of one selector: its id is the
// path of its API resource, each variable percent-encoded once, as RFC
// 6570's simple expansion does: {match_type}/{match}/{subscriber}, or
// 0.x's {topic}/{subscriber}.
func subscriptionOf(g selector, subscriber string, payload json.RawMessage) subscription {
	s := subscription{Type: "subscription", Subscriber: subscriber, Active: true, Payload: payload}
	if g.matchType == "" {
		s.ID, s.Topic = subscriptionsPath+"/"+expand(g.match)+"/"+expand(subscriber), g.match
	} else {
		s.ID, s.Match, s.MatchType = subscriptionID(g.matchType, g.match, subscriber), g.match, g.matchType
	}
	return s
}

// subscriptionID is a current subscription's id.
func subscriptionID(matchType, match, subscriber string) string {
	return subscriptionsPath + "/" + expand(matchType) + "/" + expand(match) + "/" + expand(subscriber)
}

// expand percent-encodes every byte of s but the unreserved ones.
func expand(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; unreserved(c) {
			b.WriteByte(c)
		} else {
			b.Write([]byte{'%', hex[c>>4], hex[c&15]})
		}
	}
	return b.String()
}

// announcement is the event that tells of s: private, under the
// collection's topic and its own.
func announcement(s subscription) event.Event {
	data, _ := json.Marshal(s) // strings, a bool and a token's JSON always marshal
	return event.Event{Type: event.AnnouncementType, Data: data, Update: &event.Update{Private: true, Topics: []string{s.ID}}}
}

// presence is this process's part in the tenants' presence (the store's
// presence rows, backlog/presence.go): the owner name of its rows, the
// lease that keeps them its own, and the ends whose commit failed, which
// Tend tries again.
type presence struct {
	owner string

	mu      sync.Mutex
	renewed time.Time
	// unsaid are ends not committed yet (the store failed), by
	// subscriber.
	unsaid map[string]*backlog.Publish
}

func newPresence() presence {
	return presence{owner: "urn:uuid:" + uuid.NewString(), unsaid: map[string]*backlog.Publish{}}
}

// leased renews the process's lease unless it was renewed lately, so
// that no row is added under an owner that another process could take
// for dead.
func (p *Protocol) leased(ctx context.Context) error {
	pr := &p.presence
	pr.mu.Lock()
	fresh := time.Since(pr.renewed) < renewEvery
	pr.mu.Unlock()
	if fresh {
		return nil
	}
	return p.renew(ctx)
}

func (p *Protocol) renew(ctx context.Context) error {
	now := time.Now()
	if err := p.g.Log().RenewLease(ctx, p.presence.owner, now.Add(leaseFor)); err != nil {
		return err
	}
	p.presence.mu.Lock()
	p.presence.renewed = now
	p.presence.mu.Unlock()
	return nil
}

// announced is a subscriber's subscriptions, ready to be announced: each
// one's event and presence row.
type announced struct {
	subscriber string
	events     []event.Event
	rows       []backlog.PresenceRow
}

// announce makes the announcement of a subscriber's subscriptions, one
// per distinct selector; a refusal when it would store more than
// maxAnnounced.
func announce(sel *selection, payloads auth.Payloads) (*announced, *refusal.Error) {
	a := &announced{subscriber: "urn:uuid:" + uuid.NewString()}
	size := 0
	for _, g := range sel.given {
		s := subscriptionOf(g, a.subscriber, payloads.For(g.match))
		e := announcement(s)
		a.events = append(a.events, e)
		a.rows = append(a.rows, backlog.PresenceRow{ID: s.ID, Body: e.Data})
		size += 2*len(e.Data) + len(s.ID)
	}
	if size > maxAnnounced {
		return nil, refusal.New(refusal.InvalidSelector,
			"announcing this subscription would store %d bytes, over the %d a subscription may: use fewer or shorter selectors, or a smaller payload", size, maxAnnounced)
	}
	return a, nil
}

// opened announces a subscriber's subscriptions, adding their presence
// rows in the same commit, and returns what announces their end. It is
// paid for with two of the tenant's publishes (the start and the end)
// and refused as a publish would be.
func (p *Protocol) opened(ctx context.Context, tenant string, generation int64, a *announced) (ended func(), refused *refusal.Error) {
	if err := p.leased(ctx); err != nil {
		p.g.Logger().Error("renew the Mercure presence lease", "err", err)
		return nil, refusal.New(refusal.Unavailable, "the subscription could not be announced")
	}
	if p.hooks.BeforeAnnounce != nil {
		p.hooks.BeforeAnnounce(tenant)
	}
	req := &backlog.Publish{Tenant: tenant, Topic: subscriptionsPath, Events: a.events,
		RequireTenant: !p.g.Dev(), Generation: generation,
		Presence: &backlog.PresenceOp{Subscriber: a.subscriber, Owner: p.presence.owner, Add: a.rows}}
	end := p.ending(tenant, a.subscriber, p.presence.owner, bodies(a.rows))
	// The start is waited for whether the client stays or not: a commit
	// it left while waiting for lands all the same.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tellTimeout)
	defer cancel()
	if _, err := p.g.Announce(wctx, req, 2); err != nil {
		if unclear(err) {
			// It may be committed yet (a timeout, a commit whose answer
			// was lost): its end, behind it on the same topic, removes
			// what it added, or finds nothing.
			go p.tellEnd(end)
		}
		return nil, p.g.Refusal(err, tenant, subscriptionsPath)
	}
	return func() { go p.tellEnd(end) }, nil
}

// unclear says whether a start refused with err may be committed all the
// same: not a refusal of the rate (taken before the commit) nor one the
// commit gave itself (quota, tenant gone), which stores nothing.
func unclear(err error) bool {
	var re *refusal.Error
	return !errors.As(err, &re) && !errors.Is(err, backlog.ErrQuota) && !errors.Is(err, backlog.ErrNoTenant) &&
		!errors.Is(err, backlog.ErrPresenceGone) && !errors.Is(err, backlog.ErrKeyReused)
}

func bodies(rows []backlog.PresenceRow) [][]byte {
	out := make([][]byte, len(rows))
	for i, r := range rows {
		out[i] = r.Body
	}
	return out
}

// ending is the commit that announces the end of a subscriber's
// subscriptions, listed by their bodies, and removes their presence rows
// (owner's): it appends nothing if they were removed already. It needs no
// tenant generation: the rows are the tenant's only while it has them.
func (p *Protocol) ending(tenant, subscriber, owner string, listed [][]byte) *backlog.Publish {
	events := make([]event.Event, 0, len(listed))
	for _, body := range listed {
		var s subscription
		if err := json.Unmarshal(body, &s); err != nil {
			continue // a row only this package writes
		}
		s.Active = false
		events = append(events, announcement(s))
	}
	return &backlog.Publish{Tenant: tenant, Topic: subscriptionsPath, Events: events,
		Presence: &backlog.PresenceOp{Subscriber: subscriber, Owner: owner, Remove: len(listed)}}
}

// tellEnd commits an end; one that fails for a reason other than its
// rows being gone is kept for Tend to try again.
func (p *Protocol) tellEnd(req *backlog.Publish) {
	if p.hooks.BeforeTellEnd != nil {
		p.hooks.BeforeTellEnd(req.Tenant)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tellTimeout)
	defer cancel()
	_, err := p.g.Announce(ctx, req, 0)
	pr := &p.presence
	pr.mu.Lock()
	defer pr.mu.Unlock()
	switch {
	case err == nil, errors.Is(err, backlog.ErrPresenceGone):
		delete(pr.unsaid, req.Presence.Subscriber)
	default:
		p.g.Logger().Warn("announce the end of Mercure subscriptions; trying again", "tenant", req.Tenant, "err", err)
		pr.unsaid[req.Presence.Subscriber] = req
	}
}

// Tend keeps this process's presence: it renews its lease, announces
// again the ends that could not be, and announces the end of the
// subscriptions of processes whose lease expired (they died, or lost
// the store for longer than a lease), each subscriber's in one commit
// that removes their rows, so that no end is told twice whichever
// process tells it. The server calls it every renewEvery while it runs.
func (p *Protocol) Tend(ctx context.Context) error {
	if !p.cfg.Subscriptions {
		return nil
	}
	if err := p.renew(ctx); err != nil {
		return err
	}
	p.presence.mu.Lock()
	unsaid := make([]*backlog.Publish, 0, len(p.presence.unsaid))
	for _, req := range p.presence.unsaid {
		unsaid = append(unsaid, req)
	}
	p.presence.mu.Unlock()
	for _, req := range unsaid {
		p.tellEnd(req)
	}
	orphans, err := p.g.Log().Orphans(ctx, time.Now(), orphansPerRound)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range orphans {
		listed := make([][]byte, len(o.Rows))
		for i, r := range o.Rows {
			listed[i] = r.Body
		}
		_, err := p.g.Announce(ctx, p.ending(o.Tenant, o.Subscriber, o.Owner, listed), 0)
		if err != nil && !errors.Is(err, backlog.ErrPresenceGone) {
			errs = append(errs, fmt.Errorf("announce the end of subscriber %s of %s: %w", o.Subscriber, o.Tenant, err))
		}
	}
	return errors.Join(errs...) // one tenant's failure holds up no other's
}

// RenewEvery is how often the server calls Tend.
func (p *Protocol) RenewEvery() time.Duration { return renewEvery }

// subscriptions serves the subscriptions API, where the tenant turned it
// on: the collection, a selector's collection (0.x: a topic's), or one
// subscription, of every process's subscribers, with the cursor to
// subscribe to their events from.
func (p *Protocol) subscriptions(w http.ResponseWriter, r *http.Request, ps httprouter.Params, tenant string) {
	a, anonymous, aerr := p.g.AuthorizeSubscriber(r, tenant)
	if aerr == nil && anonymous {
		aerr = refusal.New(refusal.Unauthorized, "missing credentials: the subscriptions API needs a token that grants subscribe on its URL")
	}
	if aerr != nil {
		bearerError(w, r, aerr)
		p.g.WriteError(w, aerr)
		return
	}
	// The route's segments: the current revision's {match_type}/{match}
	// [/{subscriber}], or 0.x's {topic}[/{subscriber}], told apart by
	// whether the first is a matcher type.
	first, second, third := ps.ByName("type"), ps.ByName("match"), ps.ByName("subscriber")
	id, one, keep := subscriptionsPath, false, func(subscription) bool { return true }
	switch {
	case third != "":
		if !slices.Contains(currentTypes, first) {
			p.g.WriteError(w, refusal.New(refusal.InvalidSelector, "matcher type %q is none of %s", first, strings.Join(currentTypes, ", ")))
			return
		}
		id, one = subscriptionID(first, second, third), true
	case second != "" && slices.Contains(currentTypes, first):
		id = subscriptionsPath + "/" + expand(first) + "/" + expand(second)
	case second != "":
		id, one = subscriptionsPath+"/"+expand(first)+"/"+expand(second), true
		keep = func(s subscription) bool { return s.Topic == first }
	case first != "":
		id = subscriptionsPath + "/" + expand(first)
		keep = func(s subscription) bool { return s.Topic == first }
	}
	if !a.Token.Grant(auth.Subscribe).Match(id) {
		aerr := refusal.New(refusal.Forbidden, "the token does not grant subscribe on %s", id)
		bearerError(w, r, aerr)
		p.g.WriteError(w, aerr)
		return
	}
	if !p.g.MercureSettings(r, a).Subscriptions {
		p.g.WriteError(w, refusal.New(refusal.NotFound, "this tenant's active subscriptions are off (its Mercure setting \"subscriptions\")"))
		return
	}
	prefix := id
	if !one {
		prefix += "/"
	}
	page, err := p.g.Log().Presence(r.Context(), tenant, prefix, maxListed)
	if err != nil {
		p.g.Logger().Error("read the subscriptions of a tenant", "tenant", tenant, "err", err)
		p.g.WriteError(w, refusal.New(refusal.Unavailable, "the subscriptions could not be read"))
		return
	}
	subs := []subscription{}
	for _, body := range page.Bodies {
		var s subscription
		if json.Unmarshal(body, &s) == nil && keep(s) && (!one || s.ID == id) {
			subs = append(subs, s)
		}
	}
	cursor := earliest
	if page.Head > 0 {
		cursor = positionID(page.Head)
	}
	var body any
	switch {
	case one && len(subs) == 0:
		p.g.WriteError(w, refusal.New(refusal.NotFound, "no active subscription %s", id))
		return
	case one:
		body = subs[0]
	default:
		body = struct {
			ID            string         `json:"id"`
			Type          string         `json:"type"`
			LastEventID   string         `json:"lastEventID"`
			Subscriptions []subscription `json:"subscriptions"`
		}{id, "subscriptions", cursor, subs}
	}
	h := w.Header()
	h.Set("Link", "<"+hubURL(r.URL.EscapedPath())+`>; rel="mercure"; last-event-id="`+cursor+`"; type="mercure"; content-type="application/json"`)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(body)
}

// hubURL is the path of the hub a subscriptions API path is below: the
// tenant's, or the well-known one.
func hubURL(path string) string {
	if i := strings.Index(path, Path+"/subscriptions"); i >= 0 {
		return path[:i+len(Path)]
	}
	return Path
}
