package httpapi

import (
	"crypto/sha256"
	_ "embed" // the OpenAPI document
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"
)

// openapiYAML is the OpenAPI 3.1 document of the routes New registers;
// the tests hold the two, and the server's real answers, to each other.
//
//go:embed openapi.yaml
var openapiYAML []byte

// openapiDocument answers GET /openapi.yaml, without credentials. The
// document changes only with the binary, so the answer is cacheable and
// carries an ETag (a hash of its bytes, computed once), and a client that
// sends it back gets 304. It is application/yaml, the registered type
// (RFC 9512) that tools and browsers know; application/openapi+yaml is
// not registered yet.
func openapiDocument() httprouter.Handle {
	sum := sha256.Sum256(openapiYAML)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	return func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		h := w.Header()
		h.Set("ETag", etag)
		h.Set("Cache-Control", "public, max-age=300")
		if etagListed(r.Header.Get("If-None-Match"), etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Type", "application/yaml")
		h.Set("Content-Length", strconv.Itoa(len(openapiYAML)))
		w.WriteHeader(http.StatusOK)
		w.Write(openapiYAML) //nolint:errcheck // the client may be gone; nothing to do
	}
}

// etagListed reports whether an If-None-Match value names etag, or is
// "*": the weak comparison that RFC 9110 asks of If-None-Match.
func etagListed(list, etag string) bool {
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}
