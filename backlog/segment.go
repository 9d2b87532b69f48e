package backlog

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/edgehub/edgehub/event"
)

// A segment is one events row that holds several events of a topic
// committed together (one request's, or those of a commit group's
// requests to the topic, plan 054): numbered seq-n+1 to seq (the row's
// key is its last event's number, so that every query for the rows
// after a position, or up to one, finds the rows holding those events),
// with the commit's time, and type, key, op and raw flag per event in
// data. Inserting a batch of 1000 events as 1000 rows was 2.6 µs of
// SQLite per event, most of an NDJSON batch's cost (plan 036). Readers never see a segment:
// rowEvents unpacks it, and every reader skips the events at or below
// its position and above its bound as it does rows.
//
// Layout of data, per event: a flags byte (bits 0-1 the op, bit 2 raw,
// bit 3 an update's attrs follow), then type, key and data, and the
// attrs when bit 3 is set, each a uvarint length and its bytes. weight is
// what its events weigh in usage, each as a row would (eventBytes), so a
// tenant's stored bytes do not depend on how it published them.
const (
	segOpMask   = 0b011
	segOpUpsert = 0b001
	segOpDelete = 0b010
	segRaw      = 0b100
	segUpdate   = 0b1000
)

// segmentMax is the most events one segment holds, so that a reader that
// wants a few events after a position unpacks at most this many more.
const segmentMax = 1024

// segmentMaxBytes is the most bytes of events (eventBytes) one segment
// holds, unless its one event is larger: a reader reads a row whole, and
// a commit group gathers the events of many requests to a topic.
const segmentMaxBytes = 1 << 20

// layout calls row for each run of events stored as one row, with the
// run's weight (the sum of its events' eventBytes). A run is a segment
// of events consecutive in their tenant's order (a segment's positions
// are its last one's minus the distance), at most segmentMax of them
// and segmentMaxBytes, or a single event: alone, larger than that, or an
// update with its publisher's id, which a resume looks up in its row.
func layout(events []event.Event, row func(run []event.Event, weight int64) error) error {
	for len(events) > 0 {
		n, weight := 1, eventBytes(&events[0])
		for n < len(events) && n < segmentMax && events[n].Pos == events[n-1].Pos+1 && !ownRow(&events[n-1]) && !ownRow(&events[n]) {
			w := eventBytes(&events[n])
			if weight+w > segmentMaxBytes {
				break
			}
			weight += w
			n++
		}
		if err := row(events[:n], weight); err != nil {
			return err
		}
		events = events[n:]
	}
	return nil
}

// ownRow says e must be stored as a row of its own: an update with its
// publisher's id, which a resume looks up by that id.
func ownRow(e *event.Event) bool { return e.Update != nil && e.Update.ID != "" }

// encodeSegment appends the segment of events to b, grown once.
func encodeSegment(b []byte, events []event.Event) []byte {
	size := 0
	for i := range events {
		e := &events[i]
		size += 1 + 4*binary.MaxVarintLen32 + len(e.Type) + len(e.Key) + len(e.Data)
	}
	b = slices.Grow(b, size)
	for i := range events {
		e := &events[i]
		var flags byte
		switch e.Op {
		case event.OpUpsert:
			flags = segOpUpsert
		case event.OpDelete:
			flags = segOpDelete
		}
		if e.Raw {
			flags |= segRaw
		}
		attrs := event.EncodeUpdate(e.Update)
		if attrs != nil {
			flags |= segUpdate
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(len(e.Type)))
		b = append(b, e.Type...)
		b = binary.AppendUvarint(b, uint64(len(e.Key)))
		b = append(b, e.Key...)
		b = binary.AppendUvarint(b, uint64(len(e.Data)))
		b = append(b, e.Data...)
		if attrs != nil {
			b = binary.AppendUvarint(b, uint64(len(attrs)))
			b = append(b, attrs...)
		}
	}
	return b
}

var errBadSegment = errors.New("malformed segment")

// segmentReader unpacks a segment one event at a time, so that a reader
// copies only the events it keeps.
type segmentReader struct {
	data []byte
	seq  int64 // of the next event
	time time.Time
}

// next returns the next event, its strings and data still pointing into
// the segment (the caller clones what it keeps), or false at its end.
func (r *segmentReader) next() (event.Event, bool, error) {
	if len(r.data) == 0 {
		return event.Event{}, false, nil
	}
	flags := r.data[0]
	r.data = r.data[1:]
	typ, err := r.field()
	if err != nil {
		return event.Event{}, false, err
	}
	key, err := r.field()
	if err != nil {
		return event.Event{}, false, err
	}
	data, err := r.field()
	if err != nil {
		return event.Event{}, false, err
	}
	e := event.Event{Seq: r.seq, Type: string(typ), Time: r.time, Key: string(key), Data: data, Raw: flags&segRaw != 0}
	if flags&segUpdate != 0 {
		attrs, err := r.field()
		if err != nil {
			return event.Event{}, false, err
		}
		if e.Update, err = event.DecodeUpdate(attrs); err != nil {
			return event.Event{}, false, fmt.Errorf("%w at event %d: %v", errBadSegment, r.seq, err)
		}
	}
	switch flags & segOpMask {
	case segOpUpsert:
		e.Op = event.OpUpsert
	case segOpDelete:
		e.Op = event.OpDelete
	}
	r.seq++
	return e, true, nil
}

func (r *segmentReader) field() ([]byte, error) {
	n, w := binary.Uvarint(r.data)
	if w <= 0 || n > uint64(len(r.data)-w) {
		return nil, fmt.Errorf("%w at event %d", errBadSegment, r.seq)
	}
	f := r.data[w : w+int(n)]
	r.data = r.data[w+int(n):]
	return f, nil
}

// eventRow is one events row as a reader scans it.
type eventRow struct {
	seq, n, nanos int64
	pos           int64 // of the row's last event, 0 for none
	typ, key, op  string
	data          sql.RawBytes // valid until the next row is scanned
	raw           bool
	attrs         sql.RawBytes // an update's, NULL (empty) for other events
}

// eventRowColumns are the columns of eventRow, in scan order.
var eventRowColumns = eventColumns("")

// eventColumns are the columns of eventRow, in scan order, of the events
// table as a query names it (prefix "e." for "events e").
func eventColumns(prefix string) string {
	cols := ""
	for i, c := range []string{"seq", "n", "type", "time", "key", "op", "data", "raw", "attrs"} {
		if i > 0 {
			cols += ", "
		}
		cols += prefix + c
	}
	return cols + ", coalesce(" + prefix + "pos, 0)"
}

func (r *eventRow) scanArgs() []any {
	return []any{&r.seq, &r.n, &r.typ, &r.nanos, &r.key, &r.op, &r.data, &r.raw, &r.attrs, &r.pos}
}

// posOf is the tenant position of the row's event seq.
func (r *eventRow) posOf(seq int64) int64 {
	if r.pos == 0 {
		return 0
	}
	return r.pos - (r.seq - seq)
}

// each calls fn with the row's events after after, in order, until fn
// returns false. Their data points into the row: fn clones what it keeps.
func (r *eventRow) each(after int64, fn func(e event.Event) bool) error {
	t := time.Unix(0, r.nanos).UTC()
	if r.n <= 1 {
		if r.seq > after {
			u, err := event.DecodeUpdate(r.attrs)
			if err != nil {
				return fmt.Errorf("event %d: %w", r.seq, err)
			}
			fn(event.Event{Seq: r.seq, Type: r.typ, Time: t, Key: r.key, Op: r.op, Data: []byte(r.data), Raw: r.raw, Pos: r.pos, Update: u})
		}
		return nil
	}
	sr := segmentReader{data: r.data, seq: r.seq - r.n + 1, time: t}
	for {
		e, ok, err := sr.next()
		if err != nil || !ok {
			if err == nil && sr.seq != r.seq+1 {
				err = fmt.Errorf("%w: %d events, not %d", errBadSegment, sr.seq-(r.seq-r.n+1), r.n)
			}
			return err
		}
		e.Pos = r.posOf(e.Seq)
		if e.Seq > after && !fn(e) {
			return nil
		}
	}
}
