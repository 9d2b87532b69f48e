package httpapi

import (
	"edgehub/auth"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

const (
	defaultLimit = 100
	maxLimit     = 1000
	// answerBytes bounds the event data of one read answer, as the contract
	// allows (short pages are not the end), so that what a read costs the
	// server does not grow with the size of the topic's events.
	answerBytes = 1 << 20
)

type gapRange struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

type readAnswer struct {
	Events    []json.RawMessage `json:"events"`
	Head      int64             `json:"head"`
	NextAfter int64             `json:"next_after"`
	Gap       *gapRange         `json:"gap,omitempty"`
}

// events is the polling read: a page of envelopes after a position.
func (s *Server) events(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	if aerr := s.authorize(r, tenant, topic, auth.Subscribe); aerr != nil {
		writeError(w, aerr)
		return
	}
	q := r.URL.Query()
	after, limit := int64(0), defaultLimit
	if v, ok := q["after"]; ok {
		n, valid := parsePosition(v[0])
		if !valid {
			writeError(w, errorf(http.StatusBadRequest, "invalid_position", "after must be a non-negative integer"))
			return
		}
		after = n
	}
	if v, ok := q["limit"]; ok {
		n, valid := parseLimit(v[0])
		if !valid {
			writeError(w, errorf(http.StatusBadRequest, "invalid_position", "limit must be a positive integer"))
			return
		}
		limit = n
	}
	page, err := s.deps.Log.Read(r.Context(), tenant, topic, after, limit, answerBytes)
	if err != nil {
		s.deps.Logger.Error("read events", "tenant", tenant, "topic", topic, "err", err)
		writeError(w, errorf(http.StatusServiceUnavailable, "unavailable", "the backlog could not be read"))
		return
	}
	ans := readAnswer{Events: make([]json.RawMessage, len(page.Events)), Head: page.Head, NextAfter: after}
	if page.Trimmed > after {
		ans.Gap = &gapRange{From: after + 1, To: page.Trimmed}
	}
	for i := range page.Events {
		ans.Events[i] = page.Events[i].AppendEnvelope(nil)
	}
	if n := len(page.Events); n > 0 {
		ans.NextAfter = page.Events[n-1].Seq
	}
	writeJSON(w, http.StatusOK, ans)
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
