package mercure

import (
	"context"
	"encoding/json"
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
// which each subscription has its own (subscriptionID): the same for
// both hub URLs, which serve one tenant, so that one grant covers them.
const subscriptionsPath = Path + "/subscriptions"

// subscriptionType is the SSE event type of a subscription event, which
// publishers may not use.
const subscriptionType = "mercure"

// tellTimeout bounds the commit of a subscription's end, which no
// request waits for.
const tellTimeout = 10 * time.Second

// matchTypes are the selectors' matcher types, as a subscription names
// them.
var matchTypes = []string{"exact", "urlpattern", "template"}

// subscription is one selector of one open subscriber, as the protocol's
// subscription events and API describe it.
type subscription struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	MatchType  string `json:"match_type"`
	Match      string `json:"match"`
	Subscriber string `json:"subscriber"`
	Active     bool   `json:"active"`
	// Payload is the subscriber's token's for this selector, if any.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// subscriptionID is the topic of a subscription's events and the path of
// its API resource: each variable percent-encoded once, as RFC 6570's
// simple expansion does.
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

// active is the subscriptions open at this process, by tenant and id;
// it holds one entry per selector of an open stream, so the stream
// limits bound it.
type active struct {
	mu       sync.Mutex
	byTenant map[string]map[string]subscription
}

// add lists subs as active.
func (a *active) add(tenant string, subs []subscription) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byTenant == nil {
		a.byTenant = map[string]map[string]subscription{}
	}
	m := a.byTenant[tenant]
	if m == nil {
		m = map[string]subscription{}
		a.byTenant[tenant] = m
	}
	for _, s := range subs {
		m[s.ID] = s
	}
}

// remove unlists subs.
func (a *active) remove(tenant string, subs []subscription) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.byTenant[tenant]
	for _, s := range subs {
		delete(m, s.ID)
	}
	if len(m) == 0 {
		delete(a.byTenant, tenant)
	}
}

// maxListed bounds an answer of the subscriptions API (a few MiB): the
// protocol lets a hub truncate its collections, and the stream limits
// alone would let one hold a hundred selectors per stream.
const maxListed = 10000

// list is the tenant's active subscriptions whose id starts with prefix,
// in id order, the first maxListed of them.
func (a *active) list(tenant, prefix string) []subscription {
	a.mu.Lock()
	var subs []subscription
	for id, s := range a.byTenant[tenant] {
		if strings.HasPrefix(id, prefix) {
			subs = append(subs, s)
		}
	}
	a.mu.Unlock()
	slices.SortFunc(subs, func(x, y subscription) int { return strings.Compare(x.ID, y.ID) })
	if len(subs) > maxListed {
		subs = subs[:maxListed]
	}
	return slices.Clip(subs)
}

// opened lists a subscriber's subscriptions, one per selector, and
// announces them in one commit; the function it returns unlists them and
// announces their end. Listing before the announcement and unlisting
// before the end's makes the API's list, read after its cursor, and the
// events after that cursor agree: whatever the list misses, or shows
// that has ended since, an event after the cursor tells.
func (p *Protocol) opened(r *http.Request, a accessOf, sel *selection, payloads auth.Payloads) (ended func()) {
	subscriber := "urn:uuid:" + uuid.NewString()
	subs := make([]subscription, len(sel.given))
	for i, g := range sel.given {
		subs[i] = subscription{ID: subscriptionID(g.matchType, g.match, subscriber), Type: "subscription",
			MatchType: g.matchType, Match: g.match, Subscriber: subscriber, Active: true, Payload: payloads.For(g.match)}
	}
	p.active.add(a.tenant, subs)
	if p.hooks.BeforeAnnounce != nil {
		p.hooks.BeforeAnnounce(a.tenant)
	}
	p.tell(r.Context(), a, subs)
	return func() {
		p.active.remove(a.tenant, subs)
		for i := range subs {
			subs[i].Active = false
		}
		go func() {
			if p.hooks.BeforeTellEnd != nil {
				p.hooks.BeforeTellEnd(a.tenant)
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), tellTimeout)
			defer cancel()
			p.tell(ctx, a, subs)
		}()
	}
}

// accessOf is what announcing a subscriber's subscriptions needs of its
// access: the tenant, and the generation it was authorized against, so
// that a tenant deleted since gets nothing.
type accessOf struct {
	tenant     string
	generation int64
}

// tell commits one private subscription event per subscription, each
// under its own topic as well as the collection's.
func (p *Protocol) tell(ctx context.Context, a accessOf, subs []subscription) {
	events := make([]event.Event, len(subs))
	for i, s := range subs {
		data, _ := json.Marshal(s) // strings, a bool and a token's JSON always marshal
		events[i] = event.Event{Type: subscriptionType, Data: data,
			Update: &event.Update{Private: true, Topics: []string{s.ID}}}
	}
	req := &backlog.Publish{Tenant: a.tenant, Topic: subscriptionsPath, Events: events,
		RequireTenant: !p.g.Dev(), Generation: a.generation}
	if _, err := p.g.Hubs().Publish(req).Wait(ctx); err != nil {
		p.g.Logger().Warn("announce Mercure subscriptions", "tenant", a.tenant, "active", subs[0].Active, "err", err)
	}
}

// subscriptions serves the subscriptions API: the collection, a
// selector's collection, or one subscription, of this process's
// subscribers, with the cursor to subscribe to their events from.
func (p *Protocol) subscriptions(w http.ResponseWriter, r *http.Request, ps httprouter.Params, tenant string) {
	a, anonymous, aerr := p.g.AuthorizeSubscriber(r, tenant)
	if aerr == nil && anonymous {
		aerr = refusal.New(refusal.Unauthorized, "the subscriptions API needs a token that grants subscribe on its URL")
	}
	if aerr != nil {
		bearerError(w, r, aerr)
		p.g.WriteError(w, aerr)
		return
	}
	matchType, match, subscriber := ps.ByName("type"), ps.ByName("match"), ps.ByName("subscriber")
	if matchType != "" && !slices.Contains(matchTypes, matchType) {
		p.g.WriteError(w, refusal.New(refusal.InvalidSelector, "matcher type %q is none of %s", matchType, strings.Join(matchTypes, ", ")))
		return
	}
	id := subscriptionsPath
	if matchType != "" {
		id = subscriptionID(matchType, match, subscriber)
		if subscriber == "" {
			id = strings.TrimSuffix(id, "/")
		}
	}
	if !a.Token.Grant(auth.Subscribe).Match(id) {
		aerr := refusal.New(refusal.Forbidden, "the token does not grant subscribe on %s", id)
		bearerError(w, r, aerr)
		p.g.WriteError(w, aerr)
		return
	}
	// The cursor is read before the list: every change the list misses
	// comes after it.
	head, err := p.g.Log().TenantHead(r.Context(), tenant)
	if err != nil {
		p.g.Logger().Error("read a tenant's head", "tenant", tenant, "err", err)
		p.g.WriteError(w, refusal.New(refusal.Unavailable, "the subscriptions' cursor could not be read"))
		return
	}
	cursor := earliest
	if head > 0 {
		cursor = positionID(head)
	}
	var body any
	if subscriber != "" {
		subs := p.active.list(tenant, id)
		if len(subs) == 0 || subs[0].ID != id {
			p.g.WriteError(w, refusal.New(refusal.NotFound, "no active subscription %s at this server", id))
			return
		}
		body = subs[0]
	} else {
		prefix := id + "/"
		subs := p.active.list(tenant, prefix)
		if subs == nil {
			subs = []subscription{}
		}
		body = struct {
			ID            string         `json:"id"`
			Type          string         `json:"type"`
			Subscriptions []subscription `json:"subscriptions"`
		}{id, "subscriptions", subs}
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
