package event

import "strconv"

// State is a topic's keyed state as of sequence Seq: the latest data of
// every key not deleted since, in key order, encoded as the state answer's
// body and the snapshot frame's data, {"seq":S,"state":{"<key>":<data>,...}},
// because that is all a reader does with it and one copy is what it costs.
// Storage builds JSON with AppendStateStart, AppendStateKey and
// AppendStateEnd as it reads the keys.
type State struct {
	Seq  int64
	JSON []byte
}

// AppendStateStart appends the state's JSON up to its first key.
func AppendStateStart(b []byte, seq int64) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	return append(b, `,"state":{`...)
}

// AppendStateKey appends one key and its data, which is compact JSON;
// first tells whether it is the first key, which has no comma before it.
// It adds at most len(key)+len(data)+4 bytes (keys are plain ASCII by the
// name rules, so quoting adds only the quotes).
func AppendStateKey(b []byte, first bool, key string, data []byte) []byte {
	if !first {
		b = append(b, ',')
	}
	b = strconv.AppendQuote(b, key) // keys are plain ASCII by the name rules
	b = append(b, ':')
	return append(b, data...)
}

// AppendStateEnd closes the state's JSON after its last key.
func AppendStateEnd(b []byte) []byte {
	return append(b, "}}"...)
}
