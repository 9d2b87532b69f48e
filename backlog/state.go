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
// state is exactly the fold of events 1..Seq, and encodes it as it reads,
// so a large state is in memory once. admit is called in the transaction,
// before any key is read, with the bytes the answer will take as the
// topic's state_bytes tells (keys and data, plus their punctuation), and
// again with more if the rows go past that: the caller takes them from its
// budget, and an error from admit (wrapped in the one returned) ends the
// read before the bytes are allocated.
func (s *Store) State(ctx context.Context, tenant, topic string, admit func(n int64) error) (event.State, error) {
	var st event.State
	tx, t, err := s.readTopic(ctx, tenant, topic)
	if err != nil {
		return st, err
	}
	if tx == nil {
		st.JSON = event.AppendStateEnd(event.AppendStateStart(nil, 0))
		return st, nil
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	st.Seq = t.head
	var size int64
	if err := tx.QueryRowContext(ctx, s.q(`SELECT state_bytes FROM topics WHERE id = ?`), t.id).Scan(&size); err != nil {
		return st, fmt.Errorf("read state size of %s/%s: %w", tenant, topic, err)
	}
	// Each key adds 4 bytes of quotes, colon and comma; an eighth covers
	// them for keys and data of 32 bytes or more.
	admitted := size + size/8 + stateFrame
	if err := admit(admitted); err != nil {
		return st, fmt.Errorf("admit the %d-byte state of %s/%s: %w", admitted, tenant, topic, err)
	}
	b := event.AppendStateStart(make([]byte, 0, admitted), st.Seq)
	rows, err := tx.QueryContext(ctx, s.q(`SELECT key, data FROM state WHERE topic_id = ? ORDER BY key`), t.id)
	if err != nil {
		return st, fmt.Errorf("read state of %s/%s: %w", tenant, topic, err)
	}
	defer rows.Close()
	first := true
	for rows.Next() {
		var key string
		var data sql.RawBytes // appended, never copied on its own
		if err := rows.Scan(&key, &data); err != nil {
			return st, fmt.Errorf("scan state of %s/%s: %w", tenant, topic, err)
		}
		if need := int64(len(b) + len(key) + len(data) + 4 + 2); need > admitted {
			more := max(need-admitted, admitted) // doubling: few copies when state_bytes says too little
			if err := admit(more); err != nil {
				return st, fmt.Errorf("admit %d more bytes of the state of %s/%s: %w", more, tenant, topic, err)
			}
			admitted += more
			b = append(make([]byte, 0, admitted), b...)
		}
		b = event.AppendStateKey(b, first, key, data)
		first = false
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("read state of %s/%s: %w", tenant, topic, err)
	}
	st.JSON = event.AppendStateEnd(b)
	return st, nil
}
