package backlog

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// The commit on PostgreSQL (plans/033-postgres-commit.md). Over
// database/sql every statement of a commit was a round trip of its own:
// eleven for one event. Here the same commit logic (commitTx) runs on a
// pipeline on the pgx connection under the database/sql one:
//
//   - round trip 1: the tenants' advisory locks; past a sync point (so
//     that the transaction's snapshot is taken only once they are held),
//     BEGIN and every read that the requests name before the logic runs:
//     tenant rows, usage, topic rows, idempotency and webhook keys, the
//     sizes of the state keys the events set;
//   - the logic then runs on those answers, and every write it makes is
//     queued;
//   - round trip 2: the queued writes, the hint, COMMIT and the locks'
//     release.
//
// Isolation. A commit runs REPEATABLE READ: one snapshot, taken once
// its tenants' locks are held, and an error for any row that another
// transaction changed since (first updater wins). SERIALIZABLE added
// nothing a commit needs, and cost two processes on separate tenants
// half a retry per commit: its predicate locks on a btree are pages, and
// every commit writes an entry into the page of topics (tenant, topic)
// that the others read their own topics from (its head is in the index
// topics_over, so no update of the row is HOT). What keeps a commit's
// invariants instead:
//
//   - against the commits of its tenant, on any process: the tenant's lock,
//     held from before its snapshot until after COMMIT; every row a commit
//     reads or writes is its tenants' (topics, usage, keys, state,
//     streams, events by topic id);
//   - against retention (the trims, the purge of trimmed rows, key
//     expiry): a trim or purge changes the very rows (the topic's, the
//     tenant's usage) that a commit which appends to the topic writes, so
//     one of them fails and runs again; expiry only deletes a key that a
//     commit which saw it has answered with;
//   - against the admin API: DeleteTenant and Rotate take the tenant's
//     lock too (inTxOf), so a commit that creates a topic cannot slip a
//     row past a deletion that did not see it;
//   - the other writes (retention, tenants) stay SERIALIZABLE among
//     themselves, as the pool's default.
//
// A read that round trip 1 did not foresee (a new topic's id, a stream's
// row, a fork's events) takes the queued writes with it and costs one
// more round trip.

// pgTouch says which rows a commit statement reads or writes, so that an
// answer read ahead is served only while nothing this transaction wrote
// since could have changed it: every statement of a SERIALIZABLE
// transaction sees the one snapshot taken by its first, plus the
// transaction's own writes. key is how many leading arguments name the
// rows, the same way in every statement of the table that has one (0:
// the statement names its rows otherwise, so it is taken to touch them
// all). Only reads whose every argument is in their key are read ahead.
type pgTouch struct {
	table string
	key   int
	write bool
}

// pgTouches declares every commit statement's pgTouch. A statement left
// out is taken to write every table
// (TestEveryCommitStatementSaysWhatItTouches).
func (st *statements) pgTouches() map[*stmt]pgTouch {
	r := func(table string, key int) pgTouch { return pgTouch{table: table, key: key} }
	w := func(table string, key int) pgTouch { return pgTouch{table: table, key: key, write: true} }
	return map[*stmt]pgTouch{
		&st.getTenant: r("tenants", 1),
		&st.getUsage:  r("usage", 1), &st.newUsage: w("usage", 1), &st.setUsage: w("usage", 0), &st.putUsage: w("usage", 1),
		&st.getTopic: r("topics", 2), &st.newTopic: w("topics", 2),
		&st.setTopic: w("topics", 0), &st.setTopicOldest: w("topics", 0), &st.trimAll: w("topics", 0), &st.setTrimmed: w("topics", 0),
		&st.getIdem: r("idempotency", 2), &st.putIdem: w("idempotency", 2),
		&st.getWebhook: r("webhook_keys", 2), &st.putWebhook: w("webhook_keys", 2),
		&st.keySize: r("state", 2), &st.upsertKey: w("state", 2), &st.deleteKey: w("state", 2),
		&st.dropState:    w("state", 1),
		&st.deletedSince: r("doomed_tenants", 0),
		&st.insert:       w("events", 0), &st.insertSegment: w("events", 0), &st.forkEvents: r("events", 0),
		&st.getStream: r("streams", 0), &st.putStream: w("streams", 0), &st.setStream: w("streams", 0),
		&st.dropStream: w("streams", 0), &st.softDelete: w("streams", 0), &st.addForks: w("streams", 0),
		&st.getProducer: r("producers", 0), &st.putProducer: w("producers", 0), &st.dropProducers: w("producers", 0),
		&st.countPresence: r("presence", 0), &st.putPresence: w("presence", 0), &st.dropPresence: w("presence", 0),
	}
}

// Reads that only round trip 1 makes: the logic asks for these by topic
// id, which is not known before it, so they name the topic.
const (
	idemByName = `SELECT i.hash, i.first, i.last, i.batch, coalesce(i.pos, 0) FROM topics t JOIN idempotency i ON i.topic_id = t.id
		WHERE t.tenant = $1 AND t.topic = $2 AND i.key = $3`
	keySizeByName = `SELECT length(s.key) + length(s.data) FROM topics t JOIN state s ON s.topic_id = t.id
		WHERE t.tenant = $1 AND t.topic = $2 AND s.key = $3`
	// beginSQL begins a commit REPEATABLE READ, not SERIALIZABLE as the
	// pool's other writes: see isolation below.
	beginSQL  = `BEGIN ISOLATION LEVEL REPEATABLE READ`
	lockSQL   = `SELECT pg_advisory_lock($1, $2)`
	unlockSQL = `SELECT pg_advisory_unlock_all()`
)

// pgDef is one commit statement as a pipeline runs it.
type pgDef struct {
	sql      string
	touch    pgTouch
	declared bool // touch was declared
}

// pgPlan is what every pipelined commit of a store shares.
type pgPlan struct {
	defs []pgDef // in the order of statements.list
	// reads are the statements that may be answered ahead, by table.
	reads map[string][]*pgDef
	// The reads that round trip 1 makes ahead of the logic.
	getTenant, getUsage, getTopic, getIdem, getWebhook, keySize *pgDef
}

func (s *Store) pgPlan() *pgPlan {
	st := &statements{}
	touches := st.pgTouches()
	list := st.list()
	pl := &pgPlan{defs: make([]pgDef, len(list)), reads: map[string][]*pgDef{}}
	at := map[*stmt]*pgDef{}
	for i, x := range list {
		t, ok := touches[x.stmt]
		pl.defs[i] = pgDef{sql: s.q(x.sql), touch: t, declared: ok}
		d := &pl.defs[i]
		at[x.stmt] = d
		if ok && !t.write && t.key > 0 {
			pl.reads[t.table] = append(pl.reads[t.table], d)
		}
	}
	pl.getTenant, pl.getUsage, pl.getTopic = at[&st.getTenant], at[&st.getUsage], at[&st.getTopic]
	pl.getIdem, pl.getWebhook, pl.keySize = at[&st.getIdem], at[&st.getWebhook], at[&st.keySize]
	return pl
}

// tenantLocks is the first key of the advisory locks that queue commits of
// one tenant (the second is a hash of its name), apart from other
// programs' and goose's. The keys are the ones processes of earlier
// versions lock, so that they and these exclude each other.
const tenantLocks = 0x45444748 // "EDGH"

// tenantKeys are the second keys of the tenants' locks, in the
// order they are taken, so that processes that lock several never
// deadlock.
func tenantKeys(tenants []string) []int32 {
	keys := make([]int32, 0, len(tenants))
	for _, t := range tenants {
		h := fnv.New32a()
		h.Write([]byte(t))
		keys = append(keys, int32(h.Sum32()))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// commitPipelined is CommitBatch on PostgreSQL: the whole transaction on
// one connection of the write pool, run again while PostgreSQL aborts it
// for having raced another transaction (retention, the admin API; two
// processes' commits of one tenant queue on its lock instead).
func (s *Store) commitPipelined(ctx context.Context, reqs []*Publish, plan *pgPlan) ([]Result, error) {
	what := fmt.Sprintf("commit of %d requests", len(reqs))
	tenants := make([]string, len(reqs))
	for i, r := range reqs {
		tenants[i] = r.Tenant
	}
	keys := tenantKeys(tenants)
	var results []Result
	err := s.retry(ctx, func() error {
		conn, err := s.write.Conn(ctx)
		if err != nil {
			return fmt.Errorf("take a connection for %s: %w", what, err)
		}
		defer conn.Close() //nolint:errcheck // gives the connection back to the pool
		var cerr error
		err = conn.Raw(func(dc any) error {
			p := &pgPipe{ctx: ctx, conn: dc.(*stdlib.Conn).Conn(), plan: plan, known: map[string]map[answerKey]*pgAnswer{}}
			results, cerr = s.commitOn(p, reqs, keys)
			if cerr != nil {
				p.abandon()
			}
			if p.broken {
				// A transaction or a lock may be left on it: the pool
				// closes it, and the server lets them go.
				return driver.ErrBadConn
			}
			return nil
		})
		switch {
		case cerr != nil:
			return fmt.Errorf("%s: %w", what, cerr)
		case err != nil && !errors.Is(err, driver.ErrBadConn):
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// commitOn runs the commit's transaction on p, as the top of this file
// says.
func (s *Store) commitOn(p *pgPipe, reqs []*Publish, keys []int32) ([]Result, error) {
	p.locked = true
	for _, k := range keys {
		if err := p.enqueue(lockSQL, []any{int32(tenantLocks), k}, nil); err != nil {
			return nil, err
		}
	}
	// The sync point ends the locks' own implicit transaction, so that the
	// one BEGIN opens takes its snapshot once they are held: it then sees
	// every commit of the process that held them before.
	p.sync()
	if err := p.enqueue(beginSQL, nil, nil); err != nil {
		return nil, err
	}
	if err := p.prefetch(reqs); err != nil {
		return nil, err
	}
	if err := p.send(); err != nil {
		return nil, err
	}
	p.settle()
	if afterSnapshot != nil {
		afterSnapshot(s)
	}

	a := commitTx{ctx: p.ctx, quotas: s.quotas, topics: map[[2]string]*topicState{}, tenants: map[string]*tenantState{}}
	p.bind(&a.statements)
	now := s.now().UTC()
	results := make([]Result, len(reqs))
	for i, req := range reqs {
		var err error
		if results[i], err = a.append(req, now); err != nil {
			return nil, err
		}
	}
	if err := a.writeBack(now); err != nil {
		return nil, err
	}
	if s.BeforeCommit != nil {
		// A commit held open holds what it wrote, as a slow one would.
		if err := p.send(); err != nil {
			return nil, err
		}
		s.BeforeCommit()
	}
	if err := s.committed(p.ctx, p, reqs, results); err != nil {
		return nil, err
	}
	if err := p.commit(); err != nil {
		return nil, err
	}
	return results, nil
}

// afterSnapshot, when a test sets it, is called by each pipelined commit
// once its transaction has its snapshot, before the logic writes
// anything: the window in which a transaction that does not take the
// tenant's lock could commit unseen.
var afterSnapshot func(*Store)

// answerKey names an answer read ahead: the statement the logic asks it
// with and its arguments (int64 or string, at most two).
type answerKey struct {
	sql  string
	a, b any
}

// pgAnswer is a query's answer, read whole.
type pgAnswer struct {
	fields []pgconn.FieldDescription
	rows   [][][]byte
	// done says the statement ran; for COMMIT, that it committed.
	done bool
}

// pgPipe runs one commit's transaction on conn in pipeline mode.
type pgPipe struct {
	ctx  context.Context
	conn *pgx.Conn
	plan *pgPlan
	eqb  pgx.ExtendedQueryBuilder
	// queue is what the next round trip sends.
	queue []pgQueued
	// known are answers read ahead that are still true, by table.
	known map[string]map[answerKey]*pgAnswer
	// ahead are the answers of round trip 1, to be filed in known.
	ahead []aheadAnswer
	stmts []pgStmt
	// locked says the tenants' locks may be held.
	locked bool
	// broken says the connection cannot be trusted back in the pool.
	broken bool
}

// aheadAnswer is an answer read ahead, and how the logic will ask for it.
type aheadAnswer struct {
	def *pgDef
	key answerKey
	ans *pgAnswer
	// topic, if set, is the topic's row: the logic asks by its id (the
	// key's a), and only if it exists.
	topic *pgAnswer
}

// pgQueued is a statement to send, or a sync point.
type pgQueued struct {
	sd               *pgconn.StatementDescription
	params           [][]byte
	formats, results []int16
	into             *pgAnswer // where its rows go, and that it ran
	sync             bool
}

// enqueue adds a statement to the next round trip. Its arguments are
// encoded now: the caller may reuse them.
func (p *pgPipe) enqueue(query string, args []any, into *pgAnswer) error {
	sd, err := p.conn.Prepare(p.ctx, query, query)
	if err != nil {
		p.broken = p.conn.IsClosed()
		return fmt.Errorf("prepare %s: %w", brief(query), err)
	}
	if err := p.eqb.Build(p.conn.TypeMap(), sd, args); err != nil {
		return fmt.Errorf("encode the arguments of %s: %w", brief(query), err)
	}
	size := 0
	for _, v := range p.eqb.ParamValues {
		size += len(v)
	}
	buf := make([]byte, 0, size)
	params := make([][]byte, len(p.eqb.ParamValues))
	for i, v := range p.eqb.ParamValues {
		if v != nil {
			buf = append(buf, v...)
			params[i] = buf[len(buf)-len(v):]
		}
	}
	p.queue = append(p.queue, pgQueued{sd: sd, params: params,
		formats: slices.Clone(p.eqb.ParamFormats), results: slices.Clone(p.eqb.ResultFormats), into: into})
	return nil
}

// sync adds a sync point: an error skips the rest of the round trip only
// up to it, and what ran before it outside a transaction commits there.
func (p *pgPipe) sync() { p.queue = append(p.queue, pgQueued{sync: true}) }

// errRolledBack is a COMMIT that rolled its transaction back.
var errRolledBack = errors.New("COMMIT rolled the transaction back")

// send runs the queue in one round trip and reads every answer. It
// returns the first error, naming its statement; the server skipped the
// statements after it up to the next sync point.
func (p *pgPipe) send() error {
	if len(p.queue) == 0 {
		return nil
	}
	if !p.queue[len(p.queue)-1].sync {
		p.sync()
	}
	q := p.queue
	p.queue = nil
	pl := p.conn.PgConn().StartPipeline(p.ctx)
	for _, x := range q {
		if x.sync {
			pl.SendPipelineSync()
		} else {
			pl.SendQueryStatement(x.sd, x.params, x.formats, x.results)
		}
	}
	if err := pl.Flush(); err != nil {
		p.broken = true
		return fmt.Errorf("send a pipeline: %w", err)
	}
	var first error
	skipping := false
	for _, x := range q {
		if x.sync {
			res, err := pl.GetResults()
			if _, ok := res.(*pgconn.PipelineSync); err != nil || !ok {
				p.broken = true
				pl.Close() //nolint:errcheck // the connection is given up, and err says why
				return errors.Join(first, fmt.Errorf("read a pipeline's sync point: %w (%T)", err, res))
			}
			skipping = false
			continue
		}
		if skipping {
			continue
		}
		if err := p.read(pl, x); err != nil {
			var pg *pgconn.PgError
			if !errors.As(err, &pg) && !errors.Is(err, errRolledBack) {
				p.broken = true
				pl.Close() //nolint:errcheck // the connection is given up, and err says why
				return errors.Join(first, err)
			}
			if first == nil {
				first = err
			}
			skipping = true
		}
	}
	if err := pl.Close(); err != nil {
		p.broken = true
		return errors.Join(first, fmt.Errorf("close a pipeline: %w", err))
	}
	return first
}

// read reads one statement's answer, into x.into if it has one.
func (p *pgPipe) read(pl *pgconn.Pipeline, x pgQueued) error {
	res, err := pl.GetResults()
	if err != nil {
		return fmt.Errorf("%s: %w", brief(x.sd.SQL), err)
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return fmt.Errorf("%s: a pipeline answered %T", brief(x.sd.SQL), res)
	}
	a := x.into
	if a != nil {
		a.fields = slices.Clone(rr.FieldDescriptions())
		for rr.NextRow() {
			vals := rr.Values()
			row := make([][]byte, len(vals))
			for i, v := range vals {
				if v != nil {
					row[i] = slices.Clone(v)
				}
			}
			a.rows = append(a.rows, row)
		}
	}
	tag, err := rr.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", brief(x.sd.SQL), err)
	}
	if x.sd.SQL == "COMMIT" && tag.String() != "COMMIT" {
		return fmt.Errorf("%w (%s)", errRolledBack, tag)
	}
	if a != nil {
		a.done = true
	}
	return nil
}

// commit sends the queued writes, COMMIT and the locks' release in one
// round trip. The release follows COMMIT, so that no other process's
// commit of the tenant reads before this one is visible. A COMMIT that
// fails skips the release (abandon gives the locks back); a commit whose
// release failed has committed: its connection goes, and its locks with
// it.
func (p *pgPipe) commit() error {
	committed, released := &pgAnswer{}, &pgAnswer{}
	if err := p.enqueue("COMMIT", nil, committed); err != nil {
		return err
	}
	if err := p.enqueue(unlockSQL, nil, released); err != nil {
		return err
	}
	err := p.send()
	if !committed.done {
		if err == nil {
			err = errors.New("COMMIT did not run")
		}
		return err
	}
	if !released.done {
		p.broken = true
	}
	p.locked = false
	return nil
}

// abandon ends, after an error, whatever transaction and locks the
// connection may hold; when it cannot, the connection is broken.
func (p *pgPipe) abandon() {
	if p.broken {
		return
	}
	inTx := p.conn.PgConn().TxStatus() != 'I'
	if !inTx && !p.locked {
		return
	}
	p.queue = nil
	p.ctx = context.WithoutCancel(p.ctx)
	if inTx {
		if err := p.enqueue("ROLLBACK", nil, nil); err != nil {
			p.broken = true
			return
		}
		p.sync()
	}
	if err := p.enqueue(unlockSQL, nil, nil); err != nil {
		p.broken = true
		return
	}
	if err := p.send(); err != nil || p.conn.PgConn().TxStatus() != 'I' {
		p.broken = true
	}
}

// ExecContext queues a statement of the hints (hints.go), whose answer
// the commit does not wait for.
func (p *pgPipe) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	return queuedResult{}, p.enqueue(query, args, nil)
}

// queuedResult is a write's result, which a pipeline does not wait for.
type queuedResult struct{}

var errNotWaited = errors.New("a queued write's result is not waited for")

func (queuedResult) LastInsertId() (int64, error) { return 0, errNotWaited }
func (queuedResult) RowsAffected() (int64, error) { return 0, errNotWaited }

// prefetch queues, for round trip 1, the reads that the requests name:
// of each tenant its row and usage, of each topic its row, of each
// idempotency key and each state key its row.
func (p *pgPipe) prefetch(reqs []*Publish) error {
	pl := p.plan
	asked := map[answerKey]bool{}
	ask := func(def *pgDef, query string, args []any, key answerKey, topic *pgAnswer) (*pgAnswer, error) {
		if asked[key] {
			return nil, nil
		}
		asked[key] = true
		a := &pgAnswer{}
		if err := p.enqueue(query, args, a); err != nil {
			return nil, err
		}
		p.ahead = append(p.ahead, aheadAnswer{def: def, key: key, ans: a, topic: topic})
		return a, nil
	}
	direct := func(def *pgDef, a, b any) (*pgAnswer, error) {
		args := []any{a}
		if b != nil {
			args = append(args, b)
		}
		return ask(def, def.sql, args, answerKey{def.sql, a, b}, nil)
	}
	topics := map[[2]string]*pgAnswer{}
	for _, r := range reqs {
		if _, err := direct(pl.getTenant, r.Tenant, nil); err != nil {
			return err
		}
		if _, err := direct(pl.getUsage, r.Tenant, nil); err != nil {
			return err
		}
		name := [2]string{r.Tenant, r.Topic}
		t, err := direct(pl.getTopic, r.Tenant, r.Topic)
		if err != nil {
			return err
		}
		if t != nil {
			topics[name] = t
		}
		t = topics[name]
		switch {
		case r.IdemKey != "" && r.TenantWideKey:
			_, err = direct(pl.getWebhook, r.Tenant, r.IdemKey)
		case r.IdemKey != "":
			// Until the topic's id is known, the topic's name stands in.
			_, err = ask(pl.getIdem, idemByName, []any{r.Tenant, r.Topic, r.IdemKey}, answerKey{pl.getIdem.sql, name, r.IdemKey}, t)
		}
		if err != nil {
			return err
		}
		for i := range r.Events {
			if e := &r.Events[i]; e.Op != "" {
				key := answerKey{pl.keySize.sql, name, e.Key}
				if _, err := ask(pl.keySize, keySizeByName, []any{r.Tenant, r.Topic, e.Key}, key, t); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// settle files round trip 1's answers under the keys that the logic asks
// them with.
func (p *pgPipe) settle() {
	for _, x := range p.ahead {
		if !x.ans.done {
			continue
		}
		key := x.key
		if x.topic != nil {
			if !x.topic.done || len(x.topic.rows) == 0 {
				continue // no topic: the logic does not ask
			}
			var id int64
			if err := x.topic.column(p, 0, &id); err != nil {
				continue // then it is asked when the logic asks
			}
			key.a = id
		}
		m := p.known[x.def.touch.table]
		if m == nil {
			m = map[answerKey]*pgAnswer{}
			p.known[x.def.touch.table] = m
		}
		m[key] = x.ans
	}
	p.ahead = nil
}

// bind points the commit's statements at the pipeline.
func (p *pgPipe) bind(st *statements) {
	list := st.list()
	p.stmts = make([]pgStmt, len(list))
	for i, x := range list {
		p.stmts[i] = pgStmt{p: p, def: &p.plan.defs[i]}
		*x.stmt = &p.stmts[i]
	}
}

// forget drops the known answers that def, run with args, may make
// untrue.
func (p *pgPipe) forget(def *pgDef, args []any) {
	if !def.declared {
		clear(p.known)
		return
	}
	if !def.touch.write {
		return
	}
	answers := p.known[def.touch.table]
	if len(answers) == 0 {
		return
	}
	if def.touch.key == 0 || len(args) < def.touch.key {
		clear(answers)
		return
	}
	for _, r := range p.plan.reads[def.touch.table] {
		if r.touch.key <= def.touch.key {
			// The write names the read's rows whole: one answer at most.
			if k, ok := keyOf(r, args[:r.touch.key]); ok {
				delete(answers, k)
			} else {
				clear(answers)
			}
			continue
		}
		for k := range answers {
			if k.sql == r.sql && prefixOf(k, args[:def.touch.key]) {
				delete(answers, k)
			}
		}
	}
}

// prefixOf says args are the first arguments of k.
func prefixOf(k answerKey, args []any) bool {
	key := [2]any{k.a, k.b}
	for i, a := range args {
		v, ok := keyArg(a)
		if !ok || i >= len(key) || v != key[i] {
			return false
		}
	}
	return true
}

// keyArg is an argument as a key holds it: int64 or string.
func keyArg(v any) (any, bool) {
	switch v := v.(type) {
	case int64, string:
		return v, true
	case int:
		return int64(v), true
	case int32:
		return int64(v), true
	}
	return nil, false
}

// keyOf is the key of def's answer to args, if it may be read ahead.
func keyOf(def *pgDef, args []any) (answerKey, bool) {
	if !def.declared || def.touch.write || def.touch.key == 0 || len(args) != def.touch.key || len(args) > 2 {
		return answerKey{}, false
	}
	k := answerKey{sql: def.sql}
	var ok bool
	if k.a, ok = keyArg(args[0]); !ok {
		return k, false
	}
	if len(args) == 2 {
		if k.b, ok = keyArg(args[1]); !ok {
			return k, false
		}
	}
	return k, true
}

// pgStmt is a commit statement on a pipeline.
type pgStmt struct {
	p   *pgPipe
	def *pgDef
}

func (s *pgStmt) ExecContext(_ context.Context, args ...any) (sql.Result, error) {
	s.p.forget(s.def, args)
	return queuedResult{}, s.p.enqueue(s.def.sql, args, nil)
}

func (s *pgStmt) QueryRowContext(_ context.Context, args ...any) rowScanner {
	a, err := s.query(args)
	if err != nil {
		return errRow{err}
	}
	if len(a.rows) == 0 {
		return errRow{sql.ErrNoRows}
	}
	return pgRow{p: s.p, fields: a.fields, vals: a.rows[0]}
}

func (s *pgStmt) QueryContext(_ context.Context, args ...any) (rowsScanner, error) {
	a, err := s.query(args)
	if err != nil {
		return nil, err
	}
	return &pgRows{p: s.p, a: a}, nil
}

func (s *pgStmt) Close() error { return nil }

// query answers from what is known, or else in a round trip of its own
// that takes the queued writes with it.
func (s *pgStmt) query(args []any) (*pgAnswer, error) {
	p := s.p
	if k, ok := keyOf(s.def, args); ok {
		if a, ok := p.known[s.def.touch.table][k]; ok {
			return a, nil
		}
	}
	p.forget(s.def, args)
	a := &pgAnswer{}
	if err := p.enqueue(s.def.sql, args, a); err != nil {
		return nil, err
	}
	if err := p.send(); err != nil {
		return nil, err
	}
	return a, nil
}

// column decodes column i of the answer's first row into dest.
func (a *pgAnswer) column(p *pgPipe, i int, dest any) error {
	f := a.fields[i]
	return p.conn.TypeMap().Scan(f.DataTypeOID, f.Format, a.rows[0][i], dest)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// pgRow is one row of an answer, decoded as pgx decodes its own.
type pgRow struct {
	p      *pgPipe
	fields []pgconn.FieldDescription
	vals   [][]byte
}

func (r pgRow) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("scan %d columns into %d values", len(r.vals), len(dest))
	}
	m := r.p.conn.TypeMap()
	for i, d := range dest {
		if err := m.Scan(r.fields[i].DataTypeOID, r.fields[i].Format, r.vals[i], d); err != nil {
			return fmt.Errorf("scan column %s: %w", r.fields[i].Name, err)
		}
	}
	return nil
}

// pgRows are an answer's rows.
type pgRows struct {
	p *pgPipe
	a *pgAnswer
	i int
}

func (r *pgRows) Next() bool {
	r.i++
	return r.i <= len(r.a.rows)
}

func (r *pgRows) Scan(dest ...any) error {
	return pgRow{p: r.p, fields: r.a.fields, vals: r.a.rows[r.i-1]}.Scan(dest...)
}

func (r *pgRows) Err() error   { return nil }
func (r *pgRows) Close() error { return nil }

// brief is a statement's SQL, short enough for an error.
func brief(query string) string {
	const most = 60
	if len(query) > most {
		return fmt.Sprintf("%q...", query[:most])
	}
	return fmt.Sprintf("%q", query)
}
