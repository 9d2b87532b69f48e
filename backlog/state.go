package backlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
)

// State reads the topic's state and head in one read transaction, so the
// state is exactly the fold of events 1..Seq.
func (s *SQLite) State(ctx context.Context, tenant, topic string) (State, error) {
	var st State
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return st, fmt.Errorf("begin state read of %s/%s: %w", tenant, topic, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	var id int64
	err = tx.QueryRowContext(ctx, `SELECT id, head FROM topics WHERE tenant = ? AND topic = ?`, tenant, topic).Scan(&id, &st.Seq)
	if errors.Is(err, sql.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read topic %s/%s: %w", tenant, topic, err)
	}
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
