package httpapi

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/edgehub/edgehub/refusal"
)

// badAfter is the message of an after that is not a position, on a watch
// and on a read alike.
const badAfter = "after must be a non-negative integer"

// writeError answers a refusal in the contract's shape,
// {"error": {"code": "...", "message": "..."}}, with the status that
// package refusal's table gives its code. Its RetryAfter, when set, goes
// out as Retry-After in whole seconds (at least 1): every refusal by a
// limit carries it.
func writeError(w http.ResponseWriter, e *refusal.Error) {
	body := struct {
		Error struct {
			Code    refusal.Code `json:"code"`
			Message string       `json:"message"`
		} `json:"error"`
	}{}
	body.Error.Code, body.Error.Message = e.Code, e.Message
	if o := observedOf(w); o != nil {
		o.code = e.Code
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(e.RetryAfter.Seconds())))))
	}
	writeJSON(w, e.Status(), body)
}

// writeJSON encodes without HTML escaping, so that envelopes in a read
// answer carry the same bytes as the watch frames.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = refusal.Internal.Status()
		buf.Reset()
		buf.WriteString(`{"error":{"code":"` + string(refusal.Internal) + `","message":"could not encode the answer"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes()) //nolint:errcheck // the client may be gone; nothing to do
}
