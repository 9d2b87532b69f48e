package backlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// purgeChunk is how many rows one purge transaction deletes at most: small
// enough that a publish waiting for the writer waits milliseconds.
const purgeChunk = 5000

// topicChunk is how many topics one listing of the age pass or the purge
// returns, and so how many topics one age transaction moves at most.
const topicChunk = 500

// keyChunk is how many expired keys one transaction deletes at most.
const keyChunk = 5000

// trimmedPosSQL is trimmedPosSQLOf for the trim point to.
func trimmedPosSQL(to string) string { return fmt.Sprintf(trimmedPosSQLOf, to) }

// The listings and the count trim are named so that tests can check
// their query plans: each must be a SEARCH of its index, never a SCAN of
// topics, so that idle topics cost nothing.
var (
	// trimByCountSQL moves the trim point of the topics over the limit
	// (?1) and sets oldest to the time of the first event kept (that of
	// the row holding it: a segment's events share their commit's). It finds
	// them through the expression index topics_over (head - trimmed).
	trimByCountSQL = `UPDATE topics SET trimmed = head - ?1, trimmed_pos = ` + trimmedPosSQL("head - ?1") + `,
		oldest = (SELECT e.time FROM events e WHERE e.topic_id = topics.id AND e.seq >= topics.head - ?1 + 1
			ORDER BY e.seq LIMIT 1)
		WHERE head - trimmed > ?1`
	// listAgedSQL lists topics whose oldest retained event was committed
	// before ?1, through the partial index topics_oldest.
	listAgedSQL = `SELECT id FROM topics WHERE oldest < ?1 ORDER BY oldest LIMIT ?2`
	// listToPurgeSQL lists topics with trimmed rows not yet deleted, after
	// id ?1, through the partial index topics_to_purge, which SQLite's
	// planner must be told to use; Postgres finds it by itself.
	listToPurgeSQL = `SELECT id FROM topics INDEXED BY topics_to_purge WHERE trimmed > purged AND id > ?1 ORDER BY id LIMIT ?2`
	// trimmedPosSQL is what a topic's trimmed_pos becomes when its trim
	// point moves to the sequence number to (an expression of the
	// topics row being updated; more than 0): the tenant position of
	// event to, taken from the row that holds it (keyed by its last
	// event), or, with that row purged already, what it was.
	trimmedPosSQLOf = `coalesce((SELECT e.pos - (e.seq - (%[1]s)) FROM events e
		WHERE e.topic_id = topics.id AND e.seq >= (%[1]s) AND e.seq - e.n < (%[1]s) ORDER BY e.seq LIMIT 1), trimmed_pos)`
	// eventBytesSQL is what an event row weighs in usage.bytes; the commit
	// adds the same measure.
	eventBytesSQL = `CAST(coalesce(sum(coalesce(weight, length(data) + length(type) + length(key) + coalesce(length(attrs), 0))), 0) AS BIGINT)`
)

// TrimByCount moves the trim point of every topic holding more than n
// events so that readers see exactly the newest n. The rows go later, in
// Purge. One statement, through an index of head - trimmed, so that its
// cost is the topics over the limit, not all topics. It returns how many
// topics were trimmed.
func (s *Store) TrimByCount(ctx context.Context, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	s.beforeTx("count")
	res, err := s.exec(ctx, trimByCountSQL, n)
	if err != nil {
		return 0, fmt.Errorf("trim by count to %d: %w", n, err)
	}
	moved, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("count topics trimmed to %d: %w", n, err)
	}
	return moved, nil
}

// TrimByAge moves the trim point of every topic past its events committed
// before now-age. It finds them through topics.oldest, a chunk of topics
// at a time, and moves each chunk in one write transaction that reads each
// topic's row again: a topic deleted (or changed) since the listing is
// acted on as it is now, never as it was. The cost grows with the topics
// and events it trims, not with the number of topics. It returns how many
// topics were trimmed.
func (s *Store) TrimByAge(ctx context.Context, age time.Duration) (int64, error) {
	if age <= 0 {
		return 0, nil
	}
	cutoff := s.now().Add(-age).UnixNano()
	var trimmed int64
	for {
		ids, err := s.listTopics(ctx, listAgedSQL, cutoff)
		if err != nil || len(ids) == 0 {
			return trimmed, err
		}
		s.beforeTx("age")
		n, err := s.trimAged(ctx, ids, cutoff)
		trimmed += n
		if err != nil || len(ids) < topicChunk {
			return trimmed, err
		}
	}
}

// trimAged moves the listed topics past their events older than cutoff in
// one transaction. Each topic it looks at leaves the listing (its oldest
// becomes >= cutoff or NULL), so TrimByAge's loop ends.
func (s *Store) trimAged(ctx context.Context, ids []int64, cutoff int64) (int64, error) {
	var moved int64
	err := s.inTx(ctx, fmt.Sprintf("age trim of %d topics", len(ids)), func(tx *sql.Tx) error {
		var err error
		moved, err = s.trimAgedIn(ctx, tx, ids, cutoff)
		return err
	})
	return moved, err
}

// trimAgedIn is trimAged's transaction.
func (s *Store) trimAgedIn(ctx context.Context, tx *sql.Tx, ids []int64, cutoff int64) (int64, error) {
	var moved int64
	for _, id := range ids {
		var head, trimmed int64
		var oldest sql.NullInt64
		err := tx.QueryRowContext(ctx, s.q(`SELECT head, trimmed, oldest FROM topics WHERE id = ?`), id).
			Scan(&head, &trimmed, &oldest)
		if errors.Is(err, sql.ErrNoRows) {
			continue // deleted since the listing
		}
		if err != nil {
			return 0, fmt.Errorf("read topic %d for age trim: %w", id, err)
		}
		if !oldest.Valid || oldest.Int64 >= cutoff {
			continue // trimmed or changed since the listing
		}
		to, next := head, sql.NullInt64{}
		var young int64
		// A row is young or old whole: a segment's events share a time.
		err = tx.QueryRowContext(ctx, s.q(`SELECT seq - n + 1, time FROM events WHERE topic_id = ? AND seq > ? AND time >= ?
			ORDER BY seq LIMIT 1`), id, trimmed, cutoff).Scan(&young, &next.Int64)
		switch {
		case err == nil:
			to, next.Valid = young-1, true
		case !errors.Is(err, sql.ErrNoRows):
			return 0, fmt.Errorf("find young events of topic %d: %w", id, err)
		}
		to = max(trimmed, min(to, head))
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE topics SET trimmed = ?1, trimmed_pos = `+trimmedPosSQL("?1")+`, oldest = ?2
			WHERE id = ?3`), to, next, id); err != nil {
			return 0, fmt.Errorf("trim topic %d by age: %w", id, err)
		}
		if to > trimmed {
			moved++
		}
	}
	return moved, nil
}

// listTopics runs a topic listing (listAgedSQL or listToPurgeSQL) on the
// read pool: the writer is not held while it runs.
func (s *Store) listTopics(ctx context.Context, query string, arg int64) ([]int64, error) {
	rows, err := s.read.QueryContext(ctx, s.q(query), arg, topicChunk)
	if err != nil {
		return nil, fmt.Errorf("list topics for retention: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("scan topic for retention: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list topics for retention: %w", err)
	}
	return ids, nil
}

// beforeTx calls the test hook, if any.
func (s *Store) beforeTx(duty string) {
	if s.BeforeRetentionTx != nil {
		s.BeforeRetentionTx(duty)
	}
}

// Purge deletes the rows at or below each topic's trim point. One write
// transaction takes topics from the listing in order and deletes at most
// purgeChunk rows in all, so many topics with a few trimmed rows each cost
// one transaction (one fsync), not one each, and a million-row trim never
// holds the writer for long: a topic with more continues in the next
// transaction. Each transaction reads each topic's row again and acts on
// what it holds then; it also takes the rows' bytes off the tenant's usage.
// It returns the number of events deleted (a segment counts all its events).
func (s *Store) Purge(ctx context.Context) (int64, error) {
	var deleted, after int64
	for {
		ids, err := s.listTopics(ctx, s.d.listToPurge, after)
		if err != nil {
			return deleted, err
		}
		for rest := ids; len(rest) > 0; {
			s.beforeTx("purge")
			n, done, err := s.purgeTopics(ctx, rest)
			deleted += n
			if err != nil {
				return deleted, err
			}
			rest = rest[done:]
		}
		if len(ids) < topicChunk {
			return deleted, nil
		}
		after = ids[len(ids)-1]
	}
}

// purgeTopics deletes, in one transaction, the trimmed rows of the topics
// ids in order, purgeChunk rows at most in all, reading each topic's trim
// and purge points inside the transaction. It returns the rows deleted and
// how many of ids it finished; the next one, if any, has rows left (a
// topic is never left unfinished before the last one it touched). A topic
// no longer in topics is skipped: its id is never reused, and a deleted
// tenant's rows are PurgeDoomed's. At least one topic is finished or
// purgeChunk rows deleted, so Purge's loop ends.
func (s *Store) purgeTopics(ctx context.Context, ids []int64) (int64, int, error) {
	var deleted int64
	var done int
	err := s.inTx(ctx, fmt.Sprintf("purge of %d topics", len(ids)), func(tx *sql.Tx) error {
		var err error
		deleted, done, err = s.purgeTopicsIn(ctx, tx, ids)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return deleted, done, nil
}

// purgeTopicsIn is purgeTopics's transaction.
func (s *Store) purgeTopicsIn(ctx context.Context, tx *sql.Tx, ids []int64) (int64, int, error) {
	var deleted int64
	budget := int64(purgeChunk)
	done := 0
	for _, id := range ids {
		if budget == 0 {
			break
		}
		var tenant string
		var trimmed, purged int64
		err := tx.QueryRowContext(ctx, s.q(`SELECT tenant, trimmed, purged FROM topics WHERE id = ?`), id).Scan(&tenant, &trimmed, &purged)
		if errors.Is(err, sql.ErrNoRows) {
			done++ // deleted since the listing
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("read topic %d for purge: %w", id, err)
		}
		if trimmed <= purged {
			done++ // purged since the listing
			continue
		}
		// The range, not the rows found in it, is what the budget pays
		// for, so a transaction never deletes more than purgeChunk rows.
		to := min(purged+budget, trimmed)
		budget -= to - purged
		// A segment that holds events on both sides of to stays whole,
		// and goes, with all its events, in the purge that passes its end.
		var bytes, n int64
		if err := tx.QueryRowContext(ctx, s.q(`SELECT `+eventBytesSQL+`, coalesce(sum(n), 0) FROM events
			WHERE topic_id = ? AND seq > ? AND seq <= ?`), id, purged, to).Scan(&bytes, &n); err != nil {
			return 0, 0, fmt.Errorf("measure purge of topic %d %d..%d: %w", id, purged+1, to, err)
		}
		// The ids of the Mercure updates that go stay resolvable
		// (UpdatePosition) for a while: a subscriber that resumes after
		// one is told of what it lost, instead of starting live.
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO trimmed_updates (update_id, topic_id, pos, created)
			SELECT update_id, topic_id, min(pos), ? FROM events WHERE topic_id = ? AND seq > ? AND seq <= ? AND update_id IS NOT NULL
			GROUP BY update_id, topic_id ON CONFLICT DO NOTHING`), s.now().UnixNano(), id, purged, to); err != nil {
			return 0, 0, fmt.Errorf("keep the update ids of topic %d %d..%d: %w", id, purged+1, to, err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM events WHERE topic_id = ? AND seq > ? AND seq <= ?`), id, purged, to); err != nil {
			return 0, 0, fmt.Errorf("purge topic %d %d..%d: %w", id, purged+1, to, err)
		}
		deleted += n
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE topics SET purged = ? WHERE id = ?`), to, id); err != nil {
			return 0, 0, fmt.Errorf("record purge of topic %d: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE usage SET bytes = bytes - ? WHERE tenant = ?`), bytes, tenant); err != nil {
			return 0, 0, fmt.Errorf("take purge of topic %d off the usage of %s: %w", id, tenant, err)
		}
		if to < trimmed {
			break // the budget is spent; this topic goes on in the next transaction
		}
		done++
	}
	return deleted, done, nil
}

// ForgetTrimmedUpdates forgets the ids of Mercure updates that retention
// removed more than age ago, keyChunk at a time; a subscriber resuming
// after one of them later starts live, as after an id the hub never gave.
// It returns how many it forgot.
func (s *Store) ForgetTrimmedUpdates(ctx context.Context, age time.Duration) (int64, error) {
	before := s.now().Add(-age).UnixNano()
	var forgot int64
	for {
		res, err := s.exec(ctx, `DELETE FROM trimmed_updates WHERE (update_id, topic_id) IN
			(SELECT update_id, topic_id FROM trimmed_updates WHERE created < ?1 LIMIT ?2)`, before, keyChunk)
		if err != nil {
			return forgot, fmt.Errorf("forget trimmed update ids: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return forgot, fmt.Errorf("count forgotten update ids: %w", err)
		}
		forgot += n
		if n < keyChunk {
			return forgot, nil
		}
	}
}

// ExpireKeys forgets idempotency keys and webhook ids older than ttl, at
// most keyChunk per transaction, so a day's worth of keys expiring at once
// never holds the writer for long. It returns how many it forgot.
func (s *Store) ExpireKeys(ctx context.Context, ttl time.Duration) (int64, error) {
	before := s.now().Add(-ttl).UnixNano()
	var expired int64
	for _, q := range []struct{ table, sql string }{
		{"idempotency", `DELETE FROM idempotency WHERE (topic_id, key) IN
			(SELECT topic_id, key FROM idempotency WHERE created < ?1 LIMIT ?2)`},
		{"webhook_keys", `DELETE FROM webhook_keys WHERE (tenant, key) IN
			(SELECT tenant, key FROM webhook_keys WHERE created < ?1 LIMIT ?2)`},
	} {
		for {
			res, err := s.exec(ctx, q.sql, before, keyChunk)
			if err != nil {
				return expired, fmt.Errorf("expire %s: %w", q.table, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return expired, fmt.Errorf("count expired %s: %w", q.table, err)
			}
			expired += n
			if n < keyChunk {
				break
			}
		}
	}
	return expired, nil
}
