package backlog

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/edgehub/edgehub/event"
)

// stateFrame is the most the answer adds around the keys: {"seq":S,"state":{}}
// with S at its widest.
const stateFrame = 64

// State reads the topic's state and head in one read transaction, so the
// state is exactly the fold of events 1..Seq, and writes it to w as it
// reads the rows, a key at a time: nothing holds the whole state but w,
// which may keep it where it likes (a spool, on disk). Before any key is
// read, w is told the bytes the answer will take as the topic's
// state_bytes says, plus their punctuation.
func (s *Store) State(ctx context.Context, tenant, topic string, w StateWriter) (int64, error) {
	tx, t, err := s.readTopic(ctx, tenant, topic)
	if err != nil {
		return 0, err
	}
	if tx == nil {
		return 0, event.WriteState(w, 0, nil)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	var size int64
	if err := tx.QueryRowContext(ctx, s.q(`SELECT state_bytes FROM topics WHERE id = ?`), t.id).Scan(&size); err != nil {
		return 0, fmt.Errorf("read state size of %s/%s: %w", tenant, topic, err)
	}
	// Each key adds 4 bytes of quotes, colon and comma; an eighth covers
	// them for keys and data of 32 bytes or more.
	if err := w.Expect(size + size/8 + stateFrame); err != nil {
		return 0, fmt.Errorf("admit the state of %s/%s: %w", tenant, topic, err)
	}
	rows, err := tx.QueryContext(ctx, s.q(`SELECT key, data FROM state WHERE topic_id = ? ORDER BY key`), t.id)
	if err != nil {
		return 0, fmt.Errorf("read state of %s/%s: %w", tenant, topic, err)
	}
	defer rows.Close()
	err = event.WriteState(w, t.head, func(key func(name string, data []byte) error) error {
		for rows.Next() {
			var name string
			var data sql.RawBytes // written, never copied on its own
			if err := rows.Scan(&name, &data); err != nil {
				return fmt.Errorf("scan state: %w", err)
			}
			if err := key(name, data); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err != nil {
		return 0, fmt.Errorf("read state of %s/%s: %w", tenant, topic, err)
	}
	return t.head, nil
}
