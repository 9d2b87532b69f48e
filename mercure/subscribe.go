package mercure

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/hub"
	"github.com/edgehub/edgehub/refusal"
)

// subscribe serves a Mercure subscription: a tenant stream whose
// selection is the protocol's, resumed after any id the hub has given,
// in Mercure's frames, withholding what the subscriber may not see.
func (p *Protocol) subscribe(w http.ResponseWriter, r *http.Request, _ httprouter.Params, tenant string) {
	a, anonymous, aerr := p.g.AuthorizeSubscriber(r, tenant)
	if aerr != nil {
		bearerError(w, r, aerr)
		p.g.WriteError(w, aerr)
		return
	}
	sel, aerr := parseSelection(r, anonymous)
	if aerr != nil {
		p.g.WriteError(w, aerr)
		return
	}
	f := &frames{grants: a.Token.Grant(auth.Subscribe), anonymous: anonymous}
	if anonymous {
		f.grants = auth.Grant{}
	}
	from, aerr := p.resume(r.Context(), r, tenant, f)
	if aerr != nil {
		p.g.WriteError(w, aerr)
		return
	}
	if !anonymous && p.cfg.Subscriptions && p.g.MercureSettings(r, a).Subscriptions {
		ann, aerr := announce(sel, a.Token.Payloads)
		if aerr != nil {
			p.g.WriteError(w, aerr)
			return
		}
		f.opened = func() (func(), *refusal.Error) {
			return p.opened(r.Context(), tenant, a.Tenant.Generation, ann)
		}
	}
	p.g.ServeTenantStream(w, r, a, sel, from, f)
}

// resume is where a subscription starts: after the update whose id the
// client sends (the Last-Event-ID header, else the current revision's
// last_event_id, else 0.x's lastEventID), at the start for earliest, or
// live from now for none, or for an id the hub has not got (which its
// Mercure-Last-Event-ID says).
func (p *Protocol) resume(ctx context.Context, r *http.Request, tenant string, f *frames) (hub.From, *refusal.Error) {
	q := r.URL.Query()
	id, asked := r.Header.Get("Last-Event-ID"), r.Header.Get("Last-Event-ID") != ""
	for _, name := range []string{"last_event_id", "lastEventID"} {
		if !asked && q.Has(name) {
			id, asked = q.Get(name), true
		}
	}
	if !asked {
		return hub.From{Now: true}, nil
	}
	f.resumed = true
	if id == earliest {
		f.lastID = earliest
		return hub.From{}, nil
	}
	if n, ok := strings.CutPrefix(id, "#"); ok {
		if pos, err := strconv.ParseInt(n, 10, 64); err == nil && pos >= 0 && strconv.FormatInt(pos, 10) == n {
			f.lastID = id
			return hub.From{After: pos}, nil
		}
	}
	pos, found, err := p.g.Log().UpdatePosition(ctx, tenant, id)
	if err != nil {
		p.g.Logger().Error("find a Mercure update by its id", "tenant", tenant, "err", err)
		return hub.From{}, refusal.New(refusal.Unavailable, "the update the subscription resumes after could not be looked up")
	}
	if !found {
		return hub.From{Now: true}, nil // the header says where it starts
	}
	f.lastID = id
	return hub.From{After: pos}, nil
}

// frames writes a subscription in Mercure's frames: each update's id (its
// publisher's, or the hub's #<position>), its type unless message, its
// retry, and one data line per line. It leaves out what the subscriber
// may not see: an update is public, or private (every native event is),
// and then only for a subscriber whose token grants one of its topics.
type frames struct {
	grants auth.Grant
	// anonymous says the subscriber has no token: it is told nothing
	// of what it may not see, the tenant's head included.
	anonymous bool
	// resumed says the client asked to resume; lastID is the id its
	// stream starts after, "" when the hub had not got the one asked for.
	resumed bool
	lastID  string
	// opened, when set, is told that the stream is open and returns
	// what to do when it ends, or a refusal: its subscription events.
	opened func() (ended func(), refused *refusal.Error)
}

// Opened tells of an open stream, and returns what tells of its end; a
// refusal ends the stream before its first byte.
func (f *frames) Opened() (ended func(), refused *refusal.Error) {
	if f.opened == nil {
		return func() {}, nil
	}
	return f.opened()
}

// Header says where a resumed stream starts, as the protocol's
// Mercure-Last-Event-ID (and 0.x's Last-Event-ID): the id asked for when
// the hub has it, else that of the head it starts at, or earliest (and
// to an anonymous subscriber, which the head's id would tell how many
// events the tenant holds, private ones included, earliest: what
// Mercure's own hub answers for an id it does not know).
func (f *frames) Header(h http.Header, position int64) {
	if !f.resumed {
		return
	}
	id := f.lastID
	switch {
	case id != "":
	case position == 0 || f.anonymous:
		id = earliest
	default:
		id = positionID(position)
	}
	h.Set("Mercure-Last-Event-ID", id)
	h.Set("Last-Event-ID", id)
}

// AppendOpen starts the body with a comment, so that the client's open
// event fires at once.
func (f *frames) AppendOpen(b []byte, _, _ int64) []byte { return append(b, ":\n\n"...) }

// AppendTenantEvent appends the frame of e, if the subscriber may see it.
func (f *frames) AppendTenantEvent(b []byte, e *event.OfTenant, _ []byte) []byte {
	u := e.Update
	if (u == nil || u.Private) && !f.grants.Match(e.Topic) && !slices.ContainsFunc(e.Others(), f.grants.Match) {
		return b
	}
	b = append(b, "id: "...)
	if u != nil && u.ID != "" {
		b = append(b, u.ID...)
	} else {
		b = append(b, positionID(e.Pos)...)
	}
	b = append(b, '\n')
	// Only the hub's own subscription events, updates of the reserved
	// type, go out as "mercure"; a native event of that type (the native
	// rules allow it) goes out as a plain message, its data as it is.
	if typ := e.Type; typ != "message" && (typ != event.AnnouncementType || e.Announcement()) {
		b = append(append(append(b, "event: "...), typ...), '\n')
	}
	if u != nil && u.Retry > 0 {
		b = strconv.AppendInt(append(b, "retry: "...), u.Retry, 10)
		b = append(b, '\n')
	}
	data := string(e.Data)
	if u != nil {
		_ = json.Unmarshal(e.Data, &data) // an update's data is stored as a JSON string
	}
	for _, line := range lines(data) {
		b = append(append(append(b, "data: "...), line...), '\n')
	}
	return append(b, '\n')
}

// AppendTopicGap appends, for a subscriber whose token grants the topic,
// a gap event: retention removed events of the topic up to sequence to
// that the stream was owed. It has no id, so the client's last id stays
// that of the frame before. Without the grant, naming the topic would
// say what the subscriber may not see.
func (f *frames) AppendTopicGap(b []byte, _ int64, topic string, to int64) []byte {
	if !f.grants.Match(topic) {
		return b
	}
	g, _ := json.Marshal(struct {
		Topic string `json:"topic"`
		To    int64  `json:"to"`
	}{topic, to}) // a string and a number always marshal
	b = append(b, "event: gap\ndata: "...)
	return append(append(b, g...), "\n\n"...)
}

// lines splits data at CRLF, CR and LF, as an SSE client joins data lines
// back with LF: at least one line.
func lines(data string) []string {
	data = strings.ReplaceAll(data, "\r\n", "\n")
	return strings.Split(strings.ReplaceAll(data, "\r", "\n"), "\n")
}
