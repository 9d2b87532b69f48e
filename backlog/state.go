package backlog

import (
	"context"
	"fmt"
	"strconv"
)

// State reads the topic's state and head in one read transaction, so the
// state is exactly the fold of events 1..Seq.
func (s *SQLite) State(ctx context.Context, tenant, topic string) (State, error) {
	var st State
	tx, t, err := s.readTopic(ctx, tenant, topic)
	if tx == nil || err != nil {
		return st, err
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	id := t.id
	st.Seq = t.head
	rows, err := tx.QueryContext(ctx, `SELECT key, data FROM state WHERE topic_id = ? ORDER BY key`, id)
	if err != nil {
		return st, fmt.Errorf("read state of %s/%s: %w", tenant, topic, err)
	}
	defer rows.Close()
	for rows.Next() {
		var kd KeyData
		var data []byte
		if err := rows.Scan(&kd.Key, &data); err != nil {
			return st, fmt.Errorf("scan state of %s/%s: %w", tenant, topic, err)
		}
		kd.Data = data
		st.Keys = append(st.Keys, kd)
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("read state of %s/%s: %w", tenant, topic, err)
	}
	return st, nil
}

// AppendJSON appends {"seq":S,"state":{...}}, the body of the state answer
// and of the snapshot frame, built by hand so a large state is one buffer.
func (st *State) AppendJSON(b []byte) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, st.Seq, 10)
	b = append(b, `,"state":{`...)
	for i, kd := range st.Keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, kd.Key) // keys are plain ASCII by the name rules
		b = append(b, ':')
		b = append(b, kd.Data...)
	}
	return append(b, "}}"...)
}
