package backlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// purgeChunk is how many sequence numbers one purge transaction covers:
// small enough that a publish waiting for the writer waits milliseconds.
const purgeChunk = 5000

// Retention says what the log keeps. Zero Events or Age keeps everything
// by that measure.
type Retention struct {
	Events         int64
	Age            time.Duration
	IdempotencyTTL time.Duration
}

// TrimByCount moves the trim point of every topic holding more than n
// events so that readers see exactly the newest n. The rows go later, in
// Purge. It returns how many topics were trimmed.
func (s *SQLite) TrimByCount(ctx context.Context, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	res, err := s.write.ExecContext(ctx, `UPDATE topics SET trimmed = head - ? WHERE head - trimmed > ?`, n, n)
	if err != nil {
		return 0, fmt.Errorf("trim by count: %w", err)
	}
	return res.RowsAffected()
}

// TrimByAge moves the trim point of every topic past its events committed
// before now-age. The search runs on a read snapshot; only the move takes
// the writer, and it never moves a trim point back.
func (s *SQLite) TrimByAge(ctx context.Context, age time.Duration) (int, error) {
	if age <= 0 {
		return 0, nil
	}
	cutoff := s.now().Add(-age).UnixNano()
	moves, err := s.agedOut(ctx, cutoff)
	if err != nil {
		return 0, err
	}
	for id, to := range moves {
		if _, err := s.write.ExecContext(ctx, `UPDATE topics SET trimmed = max(trimmed, ?) WHERE id = ?`, to, id); err != nil {
			return 0, fmt.Errorf("trim topic %d by age: %w", id, err)
		}
	}
	return len(moves), nil
}

// agedOut finds, per topic, the newest sequence number committed before
// cutoff. Sequence numbers and commit times rise together, so the first
// young event bounds the old ones; the scan covers only old rows.
func (s *SQLite) agedOut(ctx context.Context, cutoff int64) (map[int64]int64, error) {
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("begin age scan: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	type topic struct{ id, trimmed, head int64 }
	var topics []topic
	rows, err := tx.QueryContext(ctx, `SELECT id, trimmed, head FROM topics WHERE head > trimmed`)
	if err != nil {
		return nil, fmt.Errorf("list topics for age: %w", err)
	}
	for rows.Next() {
		var t topic
		if err := rows.Scan(&t.id, &t.trimmed, &t.head); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan topic for age: %w", err)
		}
		topics = append(topics, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list topics for age: %w", err)
	}
	moves := map[int64]int64{}
	for _, t := range topics {
		var young int64
		err := tx.QueryRowContext(ctx, `SELECT seq FROM events WHERE topic_id = ? AND seq > ? AND time >= ?
			ORDER BY seq LIMIT 1`, t.id, t.trimmed, cutoff).Scan(&young)
		to := young - 1
		if errors.Is(err, sql.ErrNoRows) {
			to = t.head
		} else if err != nil {
			return nil, fmt.Errorf("find young events of topic %d: %w", t.id, err)
		}
		if to > t.trimmed {
			moves[t.id] = to
		}
	}
	return moves, nil
}

// Purge deletes the rows at or below each topic's trim point, a chunk per
// transaction, so a million-row trim never holds the writer for long. It
// returns the number of rows deleted.
func (s *SQLite) Purge(ctx context.Context) (int64, error) {
	type topic struct{ id, trimmed, purged int64 }
	var topics []topic
	rows, err := s.read.QueryContext(ctx, `SELECT id, trimmed, purged FROM topics WHERE trimmed > purged`)
	if err != nil {
		return 0, fmt.Errorf("list topics to purge: %w", err)
	}
	for rows.Next() {
		var t topic
		if err := rows.Scan(&t.id, &t.trimmed, &t.purged); err != nil {
			rows.Close()
			return 0, fmt.Errorf("scan topic to purge: %w", err)
		}
		topics = append(topics, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("list topics to purge: %w", err)
	}
	var deleted int64
	for _, t := range topics {
		for from := t.purged; from < t.trimmed; from += purgeChunk {
			to := min(from+purgeChunk, t.trimmed)
			n, err := s.purgeRange(ctx, t.id, from, to)
			if err != nil {
				return deleted, err
			}
			deleted += n
		}
	}
	return deleted, nil
}

func (s *SQLite) purgeRange(ctx context.Context, topicID, from, to int64) (int64, error) {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin purge: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE topic_id = ? AND seq > ? AND seq <= ?`, topicID, from, to)
	if err != nil {
		return 0, fmt.Errorf("purge topic %d %d..%d: %w", topicID, from+1, to, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE topics SET purged = ? WHERE id = ?`, to, topicID); err != nil {
		return 0, fmt.Errorf("record purge of topic %d: %w", topicID, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit purge of topic %d: %w", topicID, err)
	}
	return res.RowsAffected()
}

// ExpireKeys forgets idempotency keys older than ttl.
func (s *SQLite) ExpireKeys(ctx context.Context, ttl time.Duration) (int64, error) {
	res, err := s.write.ExecContext(ctx, `DELETE FROM idempotency WHERE created < ?`, s.now().Add(-ttl).UnixNano())
	if err != nil {
		return 0, fmt.Errorf("expire idempotency keys: %w", err)
	}
	return res.RowsAffected()
}
