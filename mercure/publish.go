package mercure

import (
	"crypto/sha256"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/notify"
	"github.com/edgehub/edgehub/refusal"
)

// maxTopics bounds the topics of one update, as selectors are bounded.
const maxTopics = 100

// maxType bounds an update's type, in characters: Mercure takes any
// text without control characters but its own "mercure"; an event's type
// is stored with it and sent with each frame.
const maxType = 256

// earliest is the resume position of a subscriber that wants everything
// kept; publishers may not use it as an id.
const earliest = "earliest"

// update is a publish's form, checked.
type update struct {
	topics []string // the first is canonical
	data   string
	typ    string
	u      event.Update
}

// publish commits an update and answers its id once it is durable:
// 200 text/plain, as the protocol says.
func (p *Protocol) publish(w http.ResponseWriter, r *http.Request, _ httprouter.Params, tenant string) {
	ad, a, aerr := p.g.AdmitNamedInBody(w, r, tenant)
	defer ad.Release()
	if aerr != nil {
		bearerError(w, r, aerr)
		p.g.WriteError(w, aerr)
		return
	}
	if !p.g.Dev() {
		aerr = fromPage(r, a.Tenant.Mercure)
	}
	up, perr := parseForm(r, ad.Body())
	if aerr == nil {
		aerr = perr
	}
	if aerr == nil {
		aerr = granted(a.Token.Grant(auth.Publish), up.topics)
	}
	if aerr != nil {
		bearerError(w, r, aerr)
		p.g.WriteError(w, aerr)
		return
	}
	data, _ := json.Marshal(up.data) // a valid UTF-8 string always marshals
	req := &backlog.Publish{Tenant: tenant, Topic: up.topics[0],
		Events:        []event.Event{{Type: up.typ, Data: data, Update: &up.u}},
		RequireTenant: !p.g.Dev(), Generation: a.Tenant.Generation}
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		if aerr := notify.CheckIdempotencyKey(k); aerr != nil {
			p.g.WriteError(w, aerr)
			return
		}
		h := sha256.Sum256(ad.Body())
		req.IdemKey, req.IdemHash = k, h[:]
	}
	res, ok := p.g.Commit(w, r, req, ad)
	if !ok {
		return
	}
	id := up.u.ID
	if id == "" {
		if id, ok = p.hubID(r, tenant, up.topics[0], res); !ok {
			p.g.WriteError(w, refusal.New(refusal.Unavailable, "the update was committed; its id could not be read"))
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(id))
}

// hubID is the id of an update its publisher named none: a fragment
// holding its position, which a resume reads back. A repeat (idempotent)
// answers the original's, whose position its key remembers, even once
// retention removed the update; a key remembered before keys held
// positions has it read from the log.
func (p *Protocol) hubID(r *http.Request, tenant, topic string, res backlog.Result) (string, bool) {
	if res.Pos > 0 {
		return positionID(res.Pos), true
	}
	page, err := p.g.Log().Read(r.Context(), tenant, topic, res.Last-1, 1, 1)
	if err != nil || len(page.Events) == 0 || page.Events[0].Seq != res.Last {
		return "", false
	}
	return positionID(page.Events[0].Pos), true
}

// positionID is the hub's id of the event at a tenant position.
func positionID(pos int64) string { return "#" + strconv.FormatInt(pos, 10) }

// parseForm reads and checks a publish's form: the protocol's fields,
// each refused as the protocol says (400) when it could not be sent on a
// stream, names an update in the hub's own namespace, or is not ours to
// take (an id of the hub's shape).
func parseForm(r *http.Request, body []byte) (update, *refusal.Error) {
	var up update
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		return up, refusal.New(refusal.InvalidBody, "a Mercure publish is an application/x-www-form-urlencoded form")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return up, refusal.New(refusal.InvalidBody, "the form is not URL-encoded: %v", err)
	}
	up.topics = form["topic"]
	switch {
	case len(up.topics) == 0:
		return up, refusal.New(refusal.InvalidBody, `a publish names at least one "topic"`)
	case len(up.topics) > maxTopics:
		return up, refusal.New(refusal.InvalidBody, "an update has at most %d topics", maxTopics)
	}
	for _, t := range up.topics {
		if !names.ValidTopic(t) || t == "*" {
			return up, refusal.New(refusal.InvalidName, "topic %q is not a topic name", t)
		}
		if reserved(t) {
			return up, refusal.New(refusal.InvalidName, "topic %q is in the hub's own namespace, %s", t, Path)
		}
	}
	up.u.Topics = up.topics[1:]
	up.data = form.Get("data")
	if !utf8.ValidString(up.data) {
		return up, refusal.New(refusal.InvalidBody, `"data" is not UTF-8`)
	}
	up.u.Private = len(form["private"]) > 0
	if up.u.ID = form.Get("id"); up.u.ID != "" && (!fieldValue(up.u.ID) || strings.HasPrefix(up.u.ID, "#") || up.u.ID == earliest) {
		return up, refusal.New(refusal.InvalidBody, `"id" may not hold control characters, start with "#" (the hub's ids) or be "earliest"`)
	}
	up.typ = "message"
	if t := form.Get("type"); t != "" {
		if !fieldValue(t) || utf8.RuneCountInString(t) > maxType || t == event.AnnouncementType {
			return up, refusal.New(refusal.InvalidType, `"type" is 1 to %d characters with no control character, and not %q (the hub's own)`, maxType, event.AnnouncementType)
		}
		up.typ = t
	}
	if v := form.Get("retry"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return up, refusal.New(refusal.InvalidBody, `"retry" is a number of milliseconds`)
		}
		up.u.Retry = n
	}
	return up, nil
}

// fromPage refuses a publish whose token came from a cookie and whose
// page is of an origin the tenant did not list (publish_origins) and not
// the hub's own: a browser sends the cookie with any site's form, so
// without this any page could publish in its visitor's name. The page's
// origin is its Origin header, else its Referer's; a request with
// neither is no browser's page.
func fromPage(r *http.Request, m auth.MercureSettings) *refusal.Error {
	if !byCookie(r) {
		return nil
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		ref, err := url.Parse(r.Header.Get("Referer"))
		if err != nil || ref.Host == "" {
			return nil
		}
		origin = ref.Scheme + "://" + ref.Host
	}
	if m.AllowsPublishFrom(origin, r.Host) {
		return nil
	}
	return refusal.New(refusal.Forbidden, "a publish whose token comes from a cookie may come only from the hub's own pages or the tenant's publish_origins, not from %q", origin)
}

// granted refuses an update one of whose topics the token may not
// publish to: a publisher needs every topic it names.
func granted(g auth.Grant, topics []string) *refusal.Error {
	for _, t := range topics {
		if !g.Match(t) {
			return refusal.New(refusal.Forbidden, "the credentials do not cover publishing to %q", t)
		}
	}
	return nil
}

// fieldValue says whether s can be an SSE field's value: UTF-8 with no
// control character.
func fieldValue(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// hubNamespace is where relative topics resolve, to tell whether they
// land in the hub's own namespace (its subscription events).
var hubNamespace = &url.URL{Scheme: "https", Host: "mercure.invalid", Path: Path}

// reserved says whether topic, resolved against the hub's URL, is the
// hub's URL or below it: the subscription events' topics, which only the
// hub publishes.
func reserved(topic string) bool {
	ref, err := url.Parse(topic)
	if err != nil {
		return false
	}
	p := decodeUnreserved(hubNamespace.ResolveReference(ref).EscapedPath())
	return p == Path || strings.HasPrefix(p, Path+"/")
}

// decodeUnreserved decodes the percent-escapes of unreserved characters
// (RFC 3986: ALPHA DIGIT - . _ ~), which name the same path as the
// characters do, and keeps every other escape.
func decodeUnreserved(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil && unreserved(byte(c)) {
				b.WriteByte(byte(c))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
