package backlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/edgehub/edgehub/names"
)

// hintChannel is the LISTEN/NOTIFY channel of one database's processes.
const hintChannel = "edgehub"

// maxHint is the longest payload one NOTIFY carries (PostgreSQL's limit is
// 8000 bytes); a commit group's ranges take as many as they need, in the
// one transaction, which takes PostgreSQL's notify lock once.
const maxHint = 7900

// hinter sends and receives the hints that tell processes sharing a
// database what the others committed. A hint is never the data: it can be
// lost (while a listener reconnects), late, repeated or out of order, and
// the receiver reads what it names from the log.
//
// Payloads are words separated by spaces; a tenant name holds none and a
// topic is path-escaped, so it holds none either:
//
//	c PROCESS TENANT TOPIC FIRST LAST [TENANT TOPIC FIRST LAST ...]
//	t PROCESS TENANT          the tenant was deleted or rotated
//	r PROCESS TENANT i NAME   its issuer NAME was replaced or removed
//	r PROCESS TENANT j JTI    its token id JTI (path-escaped) was revoked
type hinter struct {
	process string // this process's id: its own hints are not for it
	listen  *pgx.ConnConfig
}

// execer runs a statement in a write transaction: a *sql.Tx, or the
// pipeline of a PostgreSQL commit (postgres_commit.go).
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// committed tells the other processes, inside the commit's transaction,
// which range of which topic it numbered.
func (s *Store) committed(ctx context.Context, tx execer, reqs []*Publish, results []Result) error {
	h := s.d.hints
	if h == nil {
		return nil
	}
	var b strings.Builder
	for i, r := range results {
		if r.Err != nil || r.Duplicate || len(r.Events) == 0 {
			continue
		}
		word := reqs[i].Tenant + " " + url.PathEscape(reqs[i].Topic) + " " + strconv.FormatInt(r.First, 10) + " " + strconv.FormatInt(r.Last, 10)
		if b.Len() > 0 && b.Len()+1+len(word) > maxHint {
			if err := h.send(ctx, tx, b.String()); err != nil {
				return err
			}
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString("c " + h.process)
		}
		b.WriteString(" " + word)
	}
	if b.Len() == 0 {
		return nil
	}
	return h.send(ctx, tx, b.String())
}

// tenantEnded tells the other processes, inside the transaction that
// deletes or rotates the tenant, to end its streams.
func (s *Store) tenantEnded(ctx context.Context, tx *sql.Tx, name string) error {
	if s.d.hints == nil {
		return nil
	}
	return s.d.hints.send(ctx, tx, "t "+s.d.hints.process+" "+name)
}

func (h *hinter) send(ctx context.Context, tx execer, payload string) error {
	if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, hintChannel, payload); err != nil {
		return fmt.Errorf("send hint: %w", err)
	}
	return nil
}

// Hints is what a listener does with what it hears. Each is called from
// the listener's one goroutine, in the order heard.
type Hints struct {
	// Commit says another process committed first..last of a topic.
	Commit func(tenant, topic string, first, last int64)
	// TenantEnded says another process deleted or rotated a tenant.
	TenantEnded func(tenant string)
	// Revoked says another process revoked what ends a tenant's streams
	// opened with it: an issuer's registration (RevokedIssuer) or a token
	// id (RevokedToken).
	Revoked func(tenant, kind, name string)
	// Listening says whether hints are heard. After a false, hints may
	// have been lost: at the next true every hub must read its head.
	Listening func(on bool)
}

// Shared says the log is shared with other processes, whose commits this
// one learns of only through Listen.
func (s *Store) Shared() bool { return s.d.hints != nil }

// listenRetry is the pause between attempts to listen again.
const listenRetry = 200 * time.Millisecond

// listenPing is how long the listener waits for a hint before it asks the
// server whether the connection is still there: a connection that a
// network dropped silently would otherwise look like a quiet one, and
// every hint sent meanwhile would be lost unseen.
const listenPing = 5 * time.Second

// Listen hears the other processes' hints until ctx ends, on a connection
// of its own, which it opens again whenever it is lost. It returns at
// once on a log that is not shared.
func (s *Store) Listen(ctx context.Context, h Hints, logger *slog.Logger) {
	if s.d.hints == nil {
		return
	}
	for ctx.Err() == nil {
		err := s.d.hints.listenOnce(ctx, h, logger)
		h.Listening(false)
		if ctx.Err() != nil {
			return
		}
		logger.Warn("lost the hint listener's connection; listening again", "err", err)
		select {
		case <-time.After(listenRetry):
		case <-ctx.Done():
		}
	}
}

func (h *hinter) listenOnce(ctx context.Context, on Hints, logger *slog.Logger) error {
	conn, err := pgx.ConnectConfig(ctx, h.listen)
	if err != nil {
		return fmt.Errorf("connect the hint listener: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // the connection is being given up
	if _, err := conn.Exec(ctx, "LISTEN "+hintChannel); err != nil {
		return fmt.Errorf("listen for hints: %w", err)
	}
	on.Listening(true)
	var bad int
	for {
		wait, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wait)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && pgconn.Timeout(err):
			ping, cancel := context.WithTimeout(ctx, listenPing)
			_, err = conn.Exec(ping, "SELECT 1")
			cancel()
			if err != nil {
				return fmt.Errorf("ping the hint listener's connection: %w", err)
			}
			continue
		case err != nil:
			return fmt.Errorf("wait for hints: %w", err)
		}
		if err := h.dispatch(n.Payload, on); err != nil {
			// Another program (or a newer Edgehub) on the channel: what
			// it says is skipped, and told once in a while.
			if bad++; bad == 1 || bad%1000 == 0 {
				logger.Warn("skipped hints that no Edgehub of this version sends", "count", bad, "err", err)
			}
		}
	}
}

// errBadHint is a hint that no Edgehub of this version sends.
var errBadHint = errors.New("a hint that no Edgehub of this version sends")

func (h *hinter) dispatch(payload string, on Hints) error {
	words := strings.Fields(payload)
	if len(words) < 2 {
		return fmt.Errorf("%w: %q", errBadHint, payload)
	}
	if words[1] == h.process {
		return nil
	}
	switch {
	case words[0] == "t" && len(words) == 3 && names.Valid(words[2]):
		on.TenantEnded(words[2])
		return nil
	case words[0] == "r" && len(words) == 5 && names.Valid(words[2]) && (words[3] == RevokedIssuer || words[3] == RevokedToken):
		name, err := url.PathUnescape(words[4])
		if err != nil {
			return fmt.Errorf("%w: %q", errBadHint, payload)
		}
		on.Revoked(words[2], words[3], name)
		return nil
	case words[0] == "c" && len(words) > 2 && (len(words)-2)%4 == 0:
		for w := words[2:]; len(w) > 0; w = w[4:] {
			first, ferr := strconv.ParseInt(w[2], 10, 64)
			last, lerr := strconv.ParseInt(w[3], 10, 64)
			topic, terr := url.PathUnescape(w[1])
			if ferr != nil || lerr != nil || terr != nil || first < 1 || last < first || !names.Valid(w[0]) || !names.ValidTopic(topic) {
				return fmt.Errorf("%w: %q", errBadHint, payload)
			}
			on.Commit(w[0], topic, first, last)
		}
		return nil
	}
	return fmt.Errorf("%w: %q", errBadHint, payload)
}
