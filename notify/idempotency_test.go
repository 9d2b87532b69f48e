package notify

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/refusal"
)

// Which key a request is idempotent by, and in which scope: a signed
// webhook by its webhook-id, tenant-wide, refusing another
// Idempotency-Key; a request with a token by its Idempotency-Key, per
// topic, its webhook-id ignored (a token cannot claim a webhook's id); in
// dev mode by its Idempotency-Key, else by its webhook-id, tenant-wide.
func TestIdempotencyKeyAndScope(t *testing.T) {
	for _, c := range []struct {
		name            string
		idem, webhookID string
		via             Credentials
		wantKey         string
		wantCode        refusal.Code
		wantTenantWide  bool
	}{
		{"signed webhook", "", "msg_1", Signature, "msg_1", "", true},
		{"signed with the same Idempotency-Key", "msg_1", "msg_1", Signature, "msg_1", "", true},
		{"signed with another Idempotency-Key", "r1", "msg_1", Signature, "", "invalid_idempotency_key", false},
		{"token with Idempotency-Key", "k1", "msg_1", Token, "k1", "", false},
		{"token with webhook-id only", "", "msg_1", Token, "", "", false},
		{"dev with Idempotency-Key", "k1", "msg_1", Dev, "k1", "", false},
		{"dev with webhook-id only", "", "msg_1", Dev, "msg_1", "", true},
		{"no key", "", "", Token, "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/notify", strings.NewReader(`{}`))
			if c.idem != "" {
				r.Header.Set("Idempotency-Key", c.idem)
			}
			if c.webhookID != "" {
				r.Header.Set("webhook-id", c.webhookID)
			}
			m, _ := ParseNames(r)
			perr := ParseOptions(r, &m, c.via)
			if c.wantCode != "" {
				if perr == nil || perr.Code != c.wantCode {
					t.Fatalf("got %v, want %s", perr, c.wantCode)
				}
				return
			}
			if perr != nil || m.IdemKey != c.wantKey || m.TenantWideKey != c.wantTenantWide {
				t.Fatalf("got key %q tenant-wide %v (%v)", m.IdemKey, m.TenantWideKey, perr)
			}
			a, _ := Build("t", "x", m, []byte(`{}`))
			if a.IdemKey != c.wantKey || a.TenantWideKey != c.wantTenantWide {
				t.Fatalf("append key %q tenant-wide %v", a.IdemKey, a.TenantWideKey)
			}
		})
	}
}
