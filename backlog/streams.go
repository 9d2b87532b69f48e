package backlog

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/edgehub/edgehub/event"
)

// StreamOp makes a Publish a Durable Streams operation on the stream that
// its topic is: the checks the protocol asks for (the stream exists and
// is open, the content type, Stream-Seq, producer fencing) run inside the
// committing transaction, with the append they guard, so that no two
// requests pass a check that only one of them may pass.
type StreamOp struct {
	// Create, if set, creates the stream (PUT); the request's events are
	// its first content.
	Create *StreamConfig
	// Delete deletes it: its events are trimmed (retention's purge takes
	// the rows) and its name may be used again, numbering after them.
	Delete bool
	// Touch only restarts a sliding TTL (a read).
	Touch bool
	// ContentType, for an append with a body, must match the stream's.
	ContentType string
	// WriterSeq, if set, must be above the last one the stream took
	// (Stream-Seq, compared byte-wise).
	WriterSeq string
	// Producer, if set, makes the append idempotent per producer.
	Producer *Producer
	// Close closes the stream after the append (Stream-Closed: true).
	Close bool
}

// StreamConfig is what a stream is created with, and what a second PUT
// must match to be answered 200.
type StreamConfig struct {
	ContentType string
	TTL         int64 // seconds; -1 for none
	ExpiresAt   int64 // Unix ns; 0 for none
	Closed      bool
	// ForkOf names the source stream of a fork, in the same tenant; the
	// fork inherits its events up to ForkOffset (-1: its tail), then
	// ForkSub more messages (JSON) or bytes of the next event.
	ForkOf     string
	ForkOffset int64
	ForkSub    int64
}

// Producer is an idempotent producer's request: Kafka's epoch fencing.
type Producer struct {
	ID         string
	Epoch, Seq int64
}

// StreamOutcome is how a StreamOp came out.
type StreamOutcome int

// The outcomes, each one answer of the protocol's.
const (
	StreamDone         StreamOutcome = iota // created, appended, closed or deleted
	StreamExists                            // a PUT that matched the stream
	StreamConflict                          // a PUT that did not; or a fork onto a used name
	StreamMissing                           // no such stream (or it expired)
	StreamGone                              // deleted while it had forks
	StreamClosed                            // closed: no append
	StreamTypeMismatch                      // the append's content type is not the stream's
	StreamSeqRegress                        // Stream-Seq not above the last
	ProducerStale                           // an epoch below the producer's
	ProducerBadStart                        // a new epoch not starting at seq 0
	ProducerGap                             // a seq past the next one
	ProducerDuplicate                       // a seq taken already
	ForkSourceMissing                       // the fork's source does not exist
	ForkSourceGone                          // the fork's source is deleted
	ForkBadOffset                           // past the source's tail, or before its retained data
)

// StreamResult is a StreamOp's outcome and the stream after it.
type StreamResult struct {
	Outcome StreamOutcome
	Info    StreamInfo
	// Epoch and Seq are the producer's after the request; ExpectedSeq is
	// the seq a ProducerGap wanted.
	Epoch, Seq, ExpectedSeq int64
}

// StreamInfo is a stream's row and its topic's head, as one read saw them.
type StreamInfo struct {
	TopicID   int64
	Config    StreamConfig
	Head      int64 // its topic's head: the stream's tail
	Trimmed   int64 // the topic's trim point
	Start     int64 // its data begins after this sequence number
	Touched   int64 // Unix ns of the last read or write
	Deleted   bool  // deleted while it had forks: gone
	SourceID  int64 // a fork's source topic
	ClosedBy  string
	WriterSeq string
}

// Expired says the stream's lifetime is over at now.
func (i *StreamInfo) Expired(now time.Time) bool {
	n := now.UnixNano()
	switch {
	case i.Config.ExpiresAt > 0:
		return n >= i.Config.ExpiresAt
	case i.Config.TTL >= 0:
		return n >= i.Touched+i.Config.TTL*int64(time.Second)
	}
	return false
}

// Oldest is the first sequence number a reader of the stream may still
// be given: retention may have removed some after Start.
func (i *StreamInfo) Oldest() int64 { return max(i.Start, i.Trimmed) }

const streamColumns = `s.topic_id, s.content_type, coalesce(s.ttl, -1), coalesce(s.expires_at, 0), s.closed, s.closed_by,
	s.start, s.writer_seq, coalesce(s.fork_of, 0), coalesce(f.topic, ''), s.fork_offset, s.fork_sub, s.deleted, s.touched, t.head, t.trimmed`

const streamFrom = ` FROM streams s JOIN topics t ON t.id = s.topic_id LEFT JOIN topics f ON f.id = s.fork_of`

func scanStream(row rowScanner) (StreamInfo, bool, error) {
	var i StreamInfo
	c := &i.Config
	err := row.Scan(&i.TopicID, &c.ContentType, &c.TTL, &c.ExpiresAt, &c.Closed, &i.ClosedBy,
		&i.Start, &i.WriterSeq, &i.SourceID, &c.ForkOf, &c.ForkOffset, &c.ForkSub, &i.Deleted, &i.Touched, &i.Head, &i.Trimmed)
	if errors.Is(err, sql.ErrNoRows) {
		return i, false, nil
	}
	return i, err == nil, err
}

// Stream reads the stream that tenant/name is, if it is one.
func (s *Store) Stream(ctx context.Context, tenant, name string) (StreamInfo, bool, error) {
	i, ok, err := scanStream(s.read.QueryRowContext(ctx, s.q(`SELECT `+streamColumns+streamFrom+
		` WHERE t.tenant = ? AND t.topic = ?`), tenant, name))
	if err != nil {
		return i, false, fmt.Errorf("read stream %s/%s: %w", tenant, name, err)
	}
	return i, ok, s.seen(ctx)
}

// streamStatements are the commit's statements of streams.
func (st *statements) streamList() []statementSQL {
	return []statementSQL{
		{&st.getStream, `SELECT ` + streamColumns + streamFrom + ` WHERE s.topic_id = ?`},
		{&st.putStream, `INSERT INTO streams (topic_id, content_type, ttl, expires_at, closed, start, fork_of, fork_offset, fork_sub, touched)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&st.setStream, `UPDATE streams SET closed = ?, closed_by = ?, writer_seq = ?, touched = ? WHERE topic_id = ?`},
		{&st.dropStream, `DELETE FROM streams WHERE topic_id = ?`},
		{&st.softDelete, `UPDATE streams SET deleted = ? WHERE topic_id = ?`},
		{&st.addForks, `UPDATE streams SET forks = forks + ? WHERE topic_id = ? RETURNING forks, deleted`},
		{&st.getProducer, `SELECT epoch, seq FROM producers WHERE topic_id = ? AND producer = ?`},
		{&st.putProducer, `INSERT INTO producers (topic_id, producer, epoch, seq) VALUES (?, ?, ?, ?)
			ON CONFLICT (topic_id, producer) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq`},
		{&st.dropProducers, `DELETE FROM producers WHERE topic_id = ?`},
		{&st.trimAll, `UPDATE topics SET trimmed = head, trimmed_pos = ` + trimmedPosSQL("head") + `, oldest = NULL, state_bytes = 0 WHERE id = ?`},
		{&st.dropState, `DELETE FROM state WHERE topic_id = ?`},
		{&st.setTrimmed, `UPDATE topics SET trimmed = ?1, trimmed_pos = ` + trimmedPosSQL("?1") + ` WHERE id = ?2`},
		// The rows holding events after ?2 up to ?3: a segment's first
		// event is seq - n + 1.
		{&st.forkEvents, `SELECT ` + eventRowColumns + ` FROM events WHERE topic_id = ? AND seq > ? AND seq - n < ? ORDER BY seq`},
	}
}

// streamOf reads the stream row of topic t in the transaction, if any.
func (a *commitTx) streamOf(t *topicState) (StreamInfo, bool, error) {
	if t == nil {
		return StreamInfo{}, false, nil
	}
	i, ok, err := scanStream(a.getStream.QueryRowContext(a.ctx, t.id))
	if err != nil {
		return i, false, fmt.Errorf("read stream of topic %d: %w", t.id, err)
	}
	i.Head = t.head // the commit may have advanced it
	return i, ok, nil
}

// streamTx is a StreamOp under way: what it found, for finish.
type streamTx struct {
	op     *StreamOp
	info   StreamInfo
	exists bool
	// forked are the source's events a fork inherits, numbered already.
	forked  []event.Event
	trimmed int64 // a fork's trim point: the source's oldest
	source  int64 // a fork's source topic
}

// streamBegin checks req's StreamOp against the stream as this commit
// sees it. A refusal, or an answer that changes nothing, comes back as a
// Result; otherwise the streamTx that finish completes once the events
// are in.
func (a *commitTx) streamBegin(req *Publish, ten *tenantState, t *topicState, now time.Time) (*streamTx, *Result, error) {
	op := req.Stream
	info, exists, err := a.streamOf(t)
	if err != nil {
		return nil, nil, err
	}
	sx := &streamTx{op: op, info: info, exists: exists}
	answer := func(o StreamOutcome) (*streamTx, *Result, error) {
		return nil, &Result{Stream: &StreamResult{Outcome: o, Info: sx.info}}, nil
	}
	if exists && !info.Deleted && info.Expired(now) {
		if err := a.deleteStream(req.Tenant, ten, t, &info); err != nil {
			return nil, nil, err
		}
		if info, exists, err = a.streamOf(t); err != nil {
			return nil, nil, err
		}
		sx.exists, sx.info = exists, info
	}
	switch {
	case op.Create != nil:
		if exists {
			if info.Deleted {
				return answer(StreamConflict)
			}
			if sameConfig(&info.Config, op.Create) {
				return answer(StreamExists)
			}
			return answer(StreamConflict)
		}
		if op.Create.ForkOf != "" {
			return a.forkBegin(sx, req, t, now)
		}
		return sx, nil, nil
	case !exists:
		return answer(StreamMissing)
	case info.Deleted:
		return answer(StreamGone)
	case op.Delete:
		if err := a.deleteStream(req.Tenant, ten, t, &info); err != nil {
			return nil, nil, err
		}
		return answer(StreamDone)
	case op.Touch:
		if _, err := a.setStream.ExecContext(a.ctx, info.Config.Closed, info.ClosedBy, info.WriterSeq, now.UnixNano(), info.TopicID); err != nil {
			return nil, nil, fmt.Errorf("touch stream of topic %d: %w", info.TopicID, err)
		}
		sx.info.Touched = now.UnixNano()
		return answer(StreamDone)
	}
	return a.appendBegin(sx, req)
}

// appendBegin checks an append: closure first, then content type, then
// Stream-Seq, then the producer, as the protocol orders them.
func (a *commitTx) appendBegin(sx *streamTx, req *Publish) (*streamTx, *Result, error) {
	op, info := sx.op, &sx.info
	res := &StreamResult{Info: *info}
	answer := func(o StreamOutcome) (*streamTx, *Result, error) {
		res.Outcome = o
		return nil, &Result{Stream: res}, nil
	}
	var cur struct{ epoch, seq int64 }
	known := false
	if p := op.Producer; p != nil {
		err := a.getProducer.QueryRowContext(a.ctx, info.TopicID, p.ID).Scan(&cur.epoch, &cur.seq)
		switch {
		case err == nil:
			known = true
		case !errors.Is(err, sql.ErrNoRows):
			return nil, nil, fmt.Errorf("read producer %q: %w", p.ID, err)
		}
	}
	if info.Config.Closed {
		if p := op.Producer; p != nil && info.ClosedBy == producerTuple(p) {
			res.Epoch, res.Seq = p.Epoch, p.Seq
			return answer(ProducerDuplicate)
		}
		return answer(StreamClosed)
	}
	if len(req.Events) > 0 && !sameType(info.Config.ContentType, op.ContentType) {
		return answer(StreamTypeMismatch)
	}
	if p := op.Producer; p != nil && known {
		switch {
		case p.Epoch < cur.epoch:
			res.Epoch = cur.epoch
			return answer(ProducerStale)
		case p.Epoch == cur.epoch && p.Seq <= cur.seq:
			res.Epoch, res.Seq = cur.epoch, cur.seq
			return answer(ProducerDuplicate)
		case p.Epoch == cur.epoch && p.Seq > cur.seq+1:
			res.Epoch, res.ExpectedSeq, res.Seq = cur.epoch, cur.seq+1, p.Seq
			return answer(ProducerGap)
		}
	}
	if p := op.Producer; p != nil && (!known || p.Epoch > cur.epoch) && p.Seq != 0 {
		if !known && p.Epoch == 0 {
			res.ExpectedSeq, res.Seq = 0, p.Seq
			return answer(ProducerGap)
		}
		return answer(ProducerBadStart)
	}
	if op.WriterSeq != "" && op.WriterSeq <= info.WriterSeq {
		return answer(StreamSeqRegress)
	}
	return sx, nil, nil
}

// forkBegin resolves a fork's source and the events it inherits.
func (a *commitTx) forkBegin(sx *streamTx, req *Publish, t *topicState, now time.Time) (*streamTx, *Result, error) {
	c := sx.op.Create
	answer := func(o StreamOutcome) (*streamTx, *Result, error) {
		return nil, &Result{Stream: &StreamResult{Outcome: o}}, nil
	}
	if t != nil && t.head > 0 {
		// The name's topic numbered events before: the fork's inherited
		// offsets would go back below them.
		return answer(StreamConflict)
	}
	src, err := a.findTopic(req.Tenant, c.ForkOf)
	if err != nil {
		return nil, nil, err
	}
	si, ok, err := a.streamOf(src)
	switch {
	case err != nil:
		return nil, nil, err
	case !ok || si.Expired(now):
		return answer(ForkSourceMissing)
	case si.Deleted:
		return answer(ForkSourceGone)
	}
	if c.ContentType == "" {
		c.ContentType = si.Config.ContentType
	} else if !sameType(c.ContentType, si.Config.ContentType) {
		return answer(StreamConflict)
	}
	if c.TTL < 0 && c.ExpiresAt == 0 {
		c.TTL, c.ExpiresAt = si.Config.TTL, si.Config.ExpiresAt
	}
	at := c.ForkOffset
	if at < 0 {
		at = si.Head
	}
	if at > si.Head || at < si.Oldest() {
		return answer(ForkBadOffset)
	}
	c.ForkOffset = at
	// The sub-offset takes part of what follows the anchor: so many JSON
	// messages (one per event), or so many bytes of the next event.
	jsonSource := strings.EqualFold(mediaType(si.Config.ContentType), "application/json")
	end := at
	switch {
	case c.ForkSub > 0 && jsonSource:
		end = at + c.ForkSub
	case c.ForkSub > 0:
		end = at + 1
	}
	rows, err := a.forkEvents.QueryContext(a.ctx, si.TopicID, si.Oldest(), end)
	if err != nil {
		return nil, nil, fmt.Errorf("read the events a fork inherits: %w", err)
	}
	defer rows.Close()
	var row eventRow
	for rows.Next() {
		if err := rows.Scan(row.scanArgs()...); err != nil {
			return nil, nil, fmt.Errorf("read an event a fork inherits: %w", err)
		}
		err := row.each(si.Oldest(), func(e event.Event) bool {
			if e.Seq > end {
				return false
			}
			e.Data = bytes.Clone(e.Data) // the row's bytes are the driver's
			sx.forked = append(sx.forked, e)
			return true
		})
		if err != nil {
			return nil, nil, fmt.Errorf("read an event a fork inherits: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read the events a fork inherits: %w", err)
	}
	if c.ForkSub > 0 {
		n := len(sx.forked)
		if n == 0 || sx.forked[n-1].Seq != end {
			return answer(ForkBadOffset)
		}
		if last := &sx.forked[n-1]; !jsonSource {
			if c.ForkSub > int64(len(last.Data)) {
				return answer(ForkBadOffset)
			}
			last.Data = last.Data[:c.ForkSub]
		}
	}
	sx.trimmed, sx.source = si.Oldest(), si.TopicID
	return sx, nil, nil
}

// finish writes the stream's row after its events are in: a new stream,
// or the closure, Stream-Seq, producer state and touch of an append.
func (a *commitTx) finish(sx *streamTx, t *topicState, r *Result, now time.Time) error {
	op := sx.op
	nanos := now.UnixNano()
	res := &StreamResult{Outcome: StreamDone}
	if c := op.Create; c != nil {
		var ttl, expires, forkOf any
		if c.TTL >= 0 {
			ttl = c.TTL
		}
		if c.ExpiresAt > 0 {
			expires = c.ExpiresAt
		}
		start := t.head - int64(len(r.Events))
		if sx.source != 0 {
			forkOf, start = sx.source, sx.trimmed
			if _, err := a.setTrimmed.ExecContext(a.ctx, sx.trimmed, t.id); err != nil {
				return fmt.Errorf("set the trim point of fork %d: %w", t.id, err)
			}
			var forks int64
			var deleted bool
			if err := a.addForks.QueryRowContext(a.ctx, 1, sx.source).Scan(&forks, &deleted); err != nil {
				return fmt.Errorf("count a fork of stream %d: %w", sx.source, err)
			}
		}
		if _, err := a.putStream.ExecContext(a.ctx, t.id, c.ContentType, ttl, expires, c.Closed, start,
			forkOf, c.ForkOffset, c.ForkSub, nanos); err != nil {
			return fmt.Errorf("create stream of topic %d: %w", t.id, err)
		}
		res.Info = StreamInfo{TopicID: t.id, Config: *c, Head: t.head, Start: start, Touched: nanos}
		r.Stream = res
		return nil
	}
	info := sx.info
	info.Head, info.Touched = t.head, nanos
	if op.Close {
		info.Config.Closed = true
		if op.Producer != nil {
			info.ClosedBy = producerTuple(op.Producer)
		}
	}
	if op.WriterSeq != "" {
		info.WriterSeq = op.WriterSeq
	}
	if _, err := a.setStream.ExecContext(a.ctx, info.Config.Closed, info.ClosedBy, info.WriterSeq, nanos, info.TopicID); err != nil {
		return fmt.Errorf("update stream of topic %d: %w", info.TopicID, err)
	}
	if p := op.Producer; p != nil {
		if _, err := a.putProducer.ExecContext(a.ctx, info.TopicID, p.ID, p.Epoch, p.Seq); err != nil {
			return fmt.Errorf("record producer %q: %w", p.ID, err)
		}
		res.Epoch, res.Seq = p.Epoch, p.Seq
	}
	res.Info = info
	r.Stream = res
	return nil
}

// deleteStream removes a stream: soft, while forks still read it;
// otherwise its row, producers and state go, its events are trimmed for
// the purge, and the source it forked from loses a fork (and goes too if
// it was deleted and this was its last, and so on up the chain).
func (a *commitTx) deleteStream(tenant string, ten *tenantState, t *topicState, info *StreamInfo) error {
	for {
		var forks int64
		var deleted bool
		if err := a.addForks.QueryRowContext(a.ctx, 0, info.TopicID).Scan(&forks, &deleted); err != nil {
			return fmt.Errorf("count forks of stream %d: %w", info.TopicID, err)
		}
		if forks > 0 {
			if _, err := a.softDelete.ExecContext(a.ctx, true, info.TopicID); err != nil {
				return fmt.Errorf("delete stream %d: %w", info.TopicID, err)
			}
			return nil
		}
		for _, st := range []stmt{a.dropStream, a.dropProducers, a.dropState, a.trimAll} {
			if _, err := st.ExecContext(a.ctx, info.TopicID); err != nil {
				return fmt.Errorf("delete stream %d: %w", info.TopicID, err)
			}
		}
		if t != nil {
			ten.bytes -= t.stateBytes
			ten.usageChanged = true
			t.stateBytes = 0
		}
		if info.SourceID == 0 {
			return nil
		}
		if err := a.addForks.QueryRowContext(a.ctx, -1, info.SourceID).Scan(&forks, &deleted); err != nil {
			return fmt.Errorf("count forks of stream %d: %w", info.SourceID, err)
		}
		if !deleted || forks > 0 {
			return nil
		}
		// The source was deleted while this fork read it: it goes now.
		src, err := a.findTopic(tenant, info.Config.ForkOf)
		if err != nil {
			return err
		}
		next, ok, err := a.streamOf(src)
		if err != nil || !ok {
			return err
		}
		t, info = src, &next
	}
}

// producerTuple is how a stream remembers the producer request that
// closed it.
func producerTuple(p *Producer) string {
	return p.ID + " " + strconv.FormatInt(p.Epoch, 10) + " " + strconv.FormatInt(p.Seq, 10)
}

// sameType compares content types as the protocol does: the media type,
// case-insensitively, without parameters.
func sameType(a, b string) bool {
	return strings.EqualFold(mediaType(a), mediaType(b))
}

func mediaType(ct string) string {
	t, _, _ := strings.Cut(ct, ";")
	return strings.TrimSpace(t)
}

// sameConfig says a second PUT asks for the stream that exists.
func sameConfig(have, want *StreamConfig) bool {
	if !sameType(have.ContentType, want.ContentType) || have.TTL != want.TTL || have.ExpiresAt != want.ExpiresAt ||
		have.Closed != want.Closed || have.ForkOf != want.ForkOf {
		return false
	}
	return want.ForkOf == "" || ((want.ForkOffset < 0 || have.ForkOffset == want.ForkOffset) && have.ForkSub == want.ForkSub)
}
