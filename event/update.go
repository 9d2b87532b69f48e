package event

import (
	"encoding/json"
	"fmt"
)

// Update is a Mercure update's part of its event: what the protocol lets
// a publisher say that a native event has no place for. The event's
// topic is the update's canonical topic; Topics are its others, by which
// a subscriber may match it too.
type Update struct {
	// ID is the publisher's id for the update, "" when the hub names it
	// (by its position).
	ID string `json:"id,omitempty"`
	// Private updates reach only subscribers whose token grants one of
	// the update's topics; public ones, anyone who selects it.
	Private bool     `json:"private,omitempty"`
	Topics  []string `json:"topics,omitempty"`
	// Retry is the reconnection time, in milliseconds, the publisher
	// asked subscribers to use (0: none).
	Retry int64 `json:"retry,omitempty"`
}

// AnnouncementType is the type of the hub's own Mercure announcements
// (subscription events), which no publisher may use: with an Update, it
// marks an event as one (Announcement).
const AnnouncementType = "mercure"

// Announcement says whether e is one of the hub's own Mercure
// announcements: an update of the hub's own type. Each names a new,
// unique other topic, so a stream's patterns are never tried against it
// unless the stream may receive it (backlog.Selects); a native event of
// that type is no announcement.
func (e *Event) Announcement() bool {
	return e.Update != nil && e.Type == AnnouncementType
}

// Others is the topics of e besides its own, by which a Mercure
// subscriber may select it too: none for a native event.
func (e *Event) Others() []string {
	if e.Update == nil {
		return nil
	}
	return e.Update.Topics
}

// EncodeUpdate is how an update is stored beside its event: compact
// JSON, or nil for an event that is none.
func EncodeUpdate(u *Update) []byte {
	if u == nil {
		return nil
	}
	b, _ := json.Marshal(u) // strings, a bool and a number always marshal
	return b
}

// DecodeUpdate reads what EncodeUpdate stored; empty is no update.
func DecodeUpdate(b []byte) (*Update, error) {
	if len(b) == 0 {
		return nil, nil
	}
	u := new(Update)
	if err := json.Unmarshal(b, u); err != nil {
		return nil, fmt.Errorf("a stored update: %w", err)
	}
	return u, nil
}
