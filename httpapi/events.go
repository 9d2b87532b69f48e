package httpapi

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/event"
	"github.com/edgehub/edgehub/refusal"
	"github.com/edgehub/edgehub/spool"
)

const (
	defaultLimit = 100
	maxLimit     = 1000
	// answerBytes bounds the event data of one read answer, as the contract
	// allows (short pages are not the end), so that what a read costs the
	// server does not grow with the size of the topic's events.
	answerBytes = 1 << 20
)

// events is the polling read: a page of envelopes after a position. The
// bytes its page may take are taken from the tenant's share of the read
// budget before it is read (429 overloaded if they are not free), the
// answer is encoded into a spool (its own bytes taken as it grows) and the
// page's bytes given back, then it is written at the answers' pace.
func (s *Server) events(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	if aerr := s.authorize(r, tenant, topic, auth.Subscribe); aerr != nil {
		writeError(w, aerr)
		return
	}
	// The limit (the budget) comes before the parameters, as the contract
	// orders checks; the bytes taken are those of the largest page, and
	// of the piece of the answer that the spool keeps in memory.
	page := s.deps.ReadBudget.Hold(tenant)
	defer page.Release()
	taken := int64(answerBytes + event.EnvelopeOverhead*(maxLimit+1) + spool.PieceBytes)
	if s.refuseRead(w, page.Try(taken), "events", tenant, topic) {
		return
	}
	after, limit, aerr := readParams(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	got, err := s.deps.Log.Read(r.Context(), tenant, topic, after, limit, answerBytes)
	if s.refuseRead(w, err, "events", tenant, topic) {
		return
	}
	// One event larger than a page is read alone; it needs more.
	size := event.EnvelopesBytes(got.Events)
	if size > taken && s.refuseRead(w, page.Try(size-taken), "events", tenant, topic) {
		return
	}
	a := s.newAnswer(tenant, page, true)
	defer a.close()
	err = a.Expect(size)
	if err == nil {
		err = writeReadAnswer(a, got, after)
	}
	if err == nil {
		err = a.Done()
	}
	if s.refuseRead(w, err, "events", tenant, topic) {
		return
	}
	page.Keep(a.Memory()) // the page is gone: what is left is the answer's
	s.write(w, a)
}

// writeReadAnswer writes {"events":[...],"head":H,"next_after":N,"gap":...}
// to w. Each event is dropped from the page once encoded, so the page and
// the answer are not both held whole.
func writeReadAnswer(w io.Writer, page backlog.Page, after int64) error {
	next := after
	if n := len(page.Events); n > 0 {
		next = page.Events[n-1].Seq
	}
	b := append(make([]byte, 0, 4<<10), `{"events":[`...)
	for i := range page.Events {
		if i > 0 {
			b = append(b, ',')
		}
		b = page.Events[i].AppendEnvelope(b)
		page.Events[i] = event.Event{}
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
	b = strconv.AppendInt(b, next, 10)
	if page.Trimmed > after {
		b = append(b, `,"gap":{"from":`...)
		b = strconv.AppendInt(b, after+1, 10)
		b = append(b, `,"to":`...)
		b = strconv.AppendInt(b, page.Trimmed, 10)
		b = append(b, '}')
	}
	_, err := w.Write(append(b, '}'))
	return err
}

// readParams reads a read's after= and limit=, the same on every read.
func readParams(r *http.Request) (after int64, limit int, aerr *refusal.Error) {
	q := r.URL.Query()
	if v, ok := q["after"]; ok {
		n, valid := parsePosition(v[0])
		if !valid {
			return 0, 0, refusal.New(refusal.InvalidPosition, badAfter)
		}
		after = n
	}
	limit, aerr = limitParam(q)
	return after, limit, aerr
}

// limitParam reads a read's or a listing's limit=.
func limitParam(q url.Values) (int, *refusal.Error) {
	if v, ok := q["limit"]; ok {
		n, valid := parseLimit(v[0])
		if !valid {
			return 0, refusal.New(refusal.InvalidPosition, "limit must be a positive integer")
		}
		return n, nil
	}
	return defaultLimit, nil
}

// parseLimit reads a positive decimal integer and caps it at maxLimit,
// however many digits it has.
func parseLimit(v string) (int, bool) {
	if v == "" || strings.Trim(v, "0123456789") != "" {
		return 0, false
	}
	if len(strings.TrimLeft(v, "0")) > 4 {
		return maxLimit, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n == 0 {
		return 0, false
	}
	return min(n, maxLimit), true
}
