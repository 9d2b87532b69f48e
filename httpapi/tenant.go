package httpapi

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/names"
	"github.com/edgehub/edgehub/refusal"
	"github.com/edgehub/edgehub/selector"
	"github.com/edgehub/edgehub/spool"
)

// tenantHandler serves a route of a tenant's topics taken together.
type tenantHandler func(w http.ResponseWriter, r *http.Request, tenant string)

// tenantRoute checks the tenant's name, then hands the request to h.
func (s *Server) tenantRoute(h tenantHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		tenant := p.ByName("tenant")
		if !names.Valid(tenant) {
			writeError(w, refusal.New(refusal.InvalidName,
				"tenant must be 1 to %d of A-Z a-z 0-9 . _ : ~ - and not start with '.'", names.MaxName))
			return
		}
		h(w, r, tenant)
	}
}

// selectors reads a tenant route's topic= and pattern= selectors, narrowed
// by the token's grants.
func selectors(r *http.Request, grants auth.Grant) (*selector.Set, *refusal.Error) {
	q := r.URL.Query()
	return selector.Parse(q["topic"], q["pattern"], grants)
}

// tenantEvents is the polling read of a tenant's order: the envelopes of
// its selected topics after a position, with the gaps owed, under the
// same budget and paging as a topic's read.
func (s *Server) tenantEvents(w http.ResponseWriter, r *http.Request, tenant string) {
	access, aerr := s.grants(r, tenant, "")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	page := s.deps.ReadBudget.Hold(tenant)
	defer page.Release()
	taken := int64(answerBytes + tenantEnvelopeOverhead*(maxLimit+1) + spool.PieceBytes)
	if s.refuseRead(w, page.Try(taken), "events", tenant, "") {
		return
	}
	after, limit, aerr := readParams(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	sel, aerr := selectors(r, access.Token.Subscribe)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	got, err := s.deps.Log.ReadTenant(r.Context(), tenant, after, sel, limit, answerBytes)
	if s.refuseRead(w, err, "events", tenant, "") {
		return
	}
	size := tenantPageBytes(&got)
	if size > taken && s.refuseRead(w, page.Try(size-taken), "events", tenant, "") {
		return
	}
	a := s.newAnswer(tenant, page, true)
	defer a.close()
	err = a.Expect(size)
	if err == nil {
		err = writeTenantAnswer(a, got)
	}
	if err == nil {
		err = a.Done()
	}
	if s.refuseRead(w, err, "events", tenant, "") {
		return
	}
	page.Keep(a.Memory())
	s.write(w, a)
}

// tenantEnvelopeOverhead is what a tenant envelope adds to a topic's,
// besides its topic's name: the field names and the position.
const tenantEnvelopeOverhead = event.EnvelopeOverhead + 40

// tenantPageBytes is what the answer of a tenant page takes, at most.
func tenantPageBytes(p *backlog.TenantPage) int64 {
	n := int64(tenantEnvelopeOverhead)
	for i := range p.Events {
		n += int64(event.EnvelopeBytes(&p.Events[i].Event) + 40 + 6*len(p.Events[i].Topic))
	}
	for _, g := range p.Gaps {
		n += int64(40 + 6*len(g.Topic))
	}
	return n
}

// writeTenantAnswer writes
// {"events":[...],"head":H,"next_after":N,"gaps":[{"topic":T,"to":B},...]}
// to w, gaps only when some are owed, dropping each event once encoded.
func writeTenantAnswer(w io.Writer, page backlog.TenantPage) error {
	b := append(make([]byte, 0, 4<<10), `{"events":[`...)
	for i := range page.Events {
		if i > 0 {
			b = append(b, ',')
		}
		b = page.Events[i].AppendEnvelope(b)
		page.Events[i] = event.OfTenant{}
		if len(b) >= 4<<10 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = append(b, `],"head":`...)
	b = strconv.AppendInt(b, page.Head, 10)
	b = append(b, `,"next_after":`...)
	b = strconv.AppendInt(b, page.Next, 10)
	if len(page.Gaps) > 0 {
		b = append(b, `,"gaps":[`...)
		for i, g := range page.Gaps {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"topic":`...)
			b = event.AppendJSONString(b, g.Topic)
			b = append(b, `,"to":`...)
			b = strconv.AppendInt(b, g.To, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	_, err := w.Write(append(b, '}'))
	return err
}

// topicListBytes is what one listed topic may take in the answer: a
// name of 1024 bytes, each escaped as \uXXXX at worst, and its numbers.
const topicListBytes = 6*selector.MaxBytes + 100

// topics lists the tenant's topics that the token may subscribe to and
// that match pattern, by name after after: those the log holds, and those
// only watched at this server (head 0), each with the streams open on it
// here.
func (s *Server) topics(w http.ResponseWriter, r *http.Request, tenant string) {
	access, aerr := s.grants(r, tenant, "")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	page := s.deps.ReadBudget.Hold(tenant)
	defer page.Release()
	if s.refuseRead(w, page.Try(int64(topicListBytes*maxLimit)+spool.PieceBytes), "topics", tenant, "") {
		return
	}
	q := r.URL.Query()
	limit, aerr := limitParam(q)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	pattern := "*"
	if v, ok := q["pattern"]; ok {
		pattern = v[0]
	}
	if len(pattern) == 0 || len(pattern) > selector.MaxBytes {
		writeError(w, refusal.New(refusal.InvalidSelector, "a pattern is 1 to %d bytes", selector.MaxBytes))
		return
	}
	after := q.Get("after")
	if len(after) > selector.MaxBytes {
		writeError(w, refusal.New(refusal.InvalidName, "after is a topic name, at most %d bytes", selector.MaxBytes))
		return
	}
	match := func(topic string) bool {
		return auth.MatchAny([]string{pattern}, topic) && access.Token.Subscribe.Match(topic)
	}
	open, patterned := s.openOn(tenant)
	if len(patterned) > 0 {
		// Each listed topic is tested against each selection of the
		// tenant streams open here: a page is shortened to bound that.
		limit = min(limit, max(1, patternTestsMax/len(patterned)))
	}
	listed, next, complete, err := s.deps.Log.Topics(r.Context(), tenant, after, match, limit)
	if s.refuseRead(w, err, "topics", tenant, "") {
		return
	}
	listed, next = withWatched(listed, next, complete, open, after, match, limit)
	streams := func(topic string) int {
		n := open[topic]
		for _, g := range patterned {
			if !g.sel.Names(topic) && g.sel.MatchPattern(topic) {
				n += g.n
			}
		}
		return n
	}
	a := s.newAnswer(tenant, page, true)
	defer a.close()
	err = a.Expect(int64(len(listed)*topicListBytes + 100))
	if err == nil {
		err = writeTopicList(a, listed, streams, next)
	}
	if err == nil {
		err = a.Done()
	}
	if s.refuseRead(w, err, "topics", tenant, "") {
		return
	}
	page.Keep(a.Memory())
	s.write(w, a)
}

// patternTestsMax bounds the tests of listed topics against the
// selections of the tenant streams open here, in one topic list.
const patternTestsMax = 100_000

// withWatched merges into a page of the log's topics those that streams
// here watch and the log does not hold yet: up to where the log's page
// stopped (or all of them, if it listed every topic after after), in name
// order, at most limit in all.
func withWatched(listed []backlog.TopicInfo, next string, complete bool, open map[string]int, after string, match func(string) bool, limit int) ([]backlog.TopicInfo, string) {
	held := make(map[string]bool, len(listed))
	for _, t := range listed {
		held[t.Topic] = true
	}
	added := false
	for topic := range open {
		if topic > after && (complete || topic < next) && !held[topic] && match(topic) {
			listed = append(listed, backlog.TopicInfo{Topic: topic})
			added = true
		}
	}
	if !added {
		return listed, next
	}
	slices.SortFunc(listed, func(a, b backlog.TopicInfo) int { return strings.Compare(a.Topic, b.Topic) })
	if len(listed) > limit {
		listed = listed[:limit]
	}
	return listed, listed[len(listed)-1].Topic
}

// writeTopicList writes
// {"topics":[{"topic":T,"head":H,"first":F,"streams":N},...],"next_after":"T"}.
func writeTopicList(w io.Writer, listed []backlog.TopicInfo, streams func(topic string) int, next string) error {
	b := append(make([]byte, 0, 4<<10), `{"topics":[`...)
	for i, t := range listed {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"topic":`...)
		b = event.AppendJSONString(b, t.Topic)
		b = append(b, `,"head":`...)
		b = strconv.AppendInt(b, t.Head, 10)
		b = append(b, `,"first":`...)
		b = strconv.AppendInt(b, t.First, 10)
		b = append(b, `,"streams":`...)
		b = strconv.AppendInt(b, int64(streams(t.Topic)), 10)
		b = append(b, '}')
		if len(b) >= 4<<10 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = append(b, `],"next_after":`...)
	b = event.AppendJSONString(b, next)
	_, err := w.Write(append(b, '}'))
	return err
}
