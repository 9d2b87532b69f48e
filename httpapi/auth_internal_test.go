package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/refusal"
)

// Every reason a credential can be refused for has its own message (a
// 401 says which check failed), in the characters an RFC 6750
// error_description may hold, and none speaks of the tenant's existence.
func TestEveryReasonHasItsMessage(t *testing.T) {
	seen := map[string]auth.Reason{}
	for r := auth.Missing; r <= auth.WebhookTimestamp; r++ {
		e := fromAuth(auth.Refuse(r, "detail"))
		if e.Code != refusal.Unauthorized || e.Message == "" {
			t.Errorf("reason %d: %v", r, e)
			continue
		}
		if strings.ContainsFunc(e.Message, func(c rune) bool { return c < 0x20 || c > 0x7e || c == '"' || c == '\\' }) {
			t.Errorf("reason %d: %q holds what an error_description may not", r, e.Message)
		}
		if strings.Contains(e.Message, "exist") {
			t.Errorf("reason %d: %q speaks of existence", r, e.Message)
		}
		if other, ok := seen[e.Message]; ok {
			t.Errorf("reasons %d and %d read the same: %q", other, r, e.Message)
		}
		seen[e.Message] = r
	}
	if e := fromAuth(auth.ErrForbidden); e.Code != refusal.Forbidden {
		t.Errorf("forbidden: %v", e)
	}
	if e := fromAuth(errTokenRevoked); e.Code != refusal.Unauthorized || !strings.HasPrefix(e.Message, "revoked") {
		t.Errorf("a revoked token: %v", e)
	}
}

// A client's address, which per-address shares and caps count by, is its
// connection's peer, and for IPv6 its /64: one client holds a whole
// prefix and could otherwise take as many shares as it has addresses.
func TestClientHostCountsAnIPv6ClientByItsPrefix(t *testing.T) {
	for remote, want := range map[string]string{
		"127.0.0.2:5555":                     "127.0.0.2",
		"[2001:db8:1:2:3:4:5:6]:443":         "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:ffff:ffff:1]:80": "2001:db8:1:2::/64",
		"[::ffff:10.0.0.1]:80":               "::ffff:10.0.0.1",
		"pipe":                               "pipe",
	} {
		if got := clientHost(&http.Request{RemoteAddr: remote}); got != want {
			t.Errorf("clientHost(%s) = %s, want %s", remote, got, want)
		}
	}
}
