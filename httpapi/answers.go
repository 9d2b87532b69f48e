package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/refusal"
	"github.com/edgehub/edgehub/spool"
)

// refuseRead answers a read whose bytes the budget refused with 429
// overloaded and any other failure with 503, and reports whether err was
// one at all.
func (s *Server) refuseRead(w http.ResponseWriter, err error, what, tenant, topic string) bool {
	if err == nil {
		return false
	}
	var refused *refusal.Error
	if errors.As(err, &refused) {
		writeError(w, refused)
		return true
	}
	s.deps.Logger.Error("read "+what, "tenant", tenant, "topic", topic, "err", err)
	writeError(w, refusal.New(refusal.Unavailable, "the topic's %s could not be read", what))
	return true
}

// withWriteDeadline gives every answer a write deadline when its request
// comes in, so that no answer (an error, an admin answer, /metrics) waits
// on a client that stopped reading for longer than the write timeout.
// Streams and the large read answers set fresh ones as they write. It
// also replaces the deadline that a previous request on a kept-alive
// connection left behind.
func (s *Server) withWriteDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.WriteTimeout > 0 {
			// A writer without deadlines (a test's recorder) writes without one.
			http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) //nolint:errcheck // see above
		}
		h.ServeHTTP(w, r)
	})
}

// The least a client must take of a read answer (an /events page, a
// /state, a snapshot frame): after answerGrace, answerRate bytes a second
// on average, and all of it within the write timeout. A client that
// stops reading holds its answer's bytes for answerGrace plus what its
// socket took, not for the whole write timeout.
const (
	answerGrace = 10 * time.Second
	answerRate  = 64 << 10
)

// pace gives the writes of one read answer their deadlines.
type pace struct {
	start, limit time.Time
	written      int64
}

func (s *Server) pace() pace {
	now := time.Now()
	limit := now.Add(s.cfg.WriteTimeout)
	if s.cfg.WriteTimeout <= 0 {
		limit = now.Add(time.Duration(1<<63 - 1))
	}
	return pace{start: now, limit: limit}
}

// next is the deadline of a write of n more bytes.
func (p *pace) next(n int) time.Time {
	p.written += int64(n)
	due := p.start.Add(answerGrace + time.Duration(p.written*int64(time.Second)/answerRate))
	if due.After(p.limit) {
		return p.limit
	}
	return due
}

// answer is one read answer's bytes: a spool that keeps them in memory
// while small and on disk otherwise, its disk taken from the tenant's
// share of the spool budget and its memory from memory, a hold on the
// tenant's share of the read budget.
type answer struct {
	*spool.Spool
	memory, disk *limits.Hold
}

// newAnswer starts an empty answer whose memory comes from memory: as
// the spool grows, or, if covered, out of bytes memory holds already (a
// page's, which the answer replaces as it is encoded).
func (s *Server) newAnswer(tenant string, memory *limits.Hold, covered bool) *answer {
	a := &answer{memory: memory, disk: s.deps.SpoolBudget.Hold(tenant)}
	admit := memory.Try
	if covered {
		admit = func(int64) error { return nil }
	}
	a.Spool = spool.New(s.cfg.SpoolDir, admit, a.disk.Try)
	return a
}

// close gives up the answer and every byte it held.
func (a *answer) close() {
	a.Close() //nolint:errcheck // an unlinked file: nothing is lost if its close fails
	a.memory.Release()
	a.disk.Release()
}

// write answers 200 with the answer as its JSON body, and a newline, in
// pieces, each under its pace's deadline. A client that is gone or too
// slow gets nothing more, which is all there is to do about it.
func (s *Server) write(w http.ResponseWriter, a *answer) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.FormatInt(a.Len()+1, 10))
	w.WriteHeader(http.StatusOK)
	p := s.pace()
	rc := http.NewResponseController(w)
	err := a.Pieces(func(piece []byte) error {
		rc.SetWriteDeadline(p.next(len(piece))) //nolint:errcheck // a writer without deadlines writes without one
		_, err := w.Write(piece)
		return err
	})
	if err == nil {
		_, err = w.Write([]byte{'\n'})
	}
	if err != nil {
		s.deps.Logger.Debug("answer not written", "err", err)
	}
}
