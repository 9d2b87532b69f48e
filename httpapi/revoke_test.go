package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/server"
)

// A token revoked while its stream is registered but not yet holding
// its credential (the window a revocation's scan of held credentials
// cannot see) is still refused: the stream checks again once it holds
// the credential, so it answers 401 rather than a stream that no
// revocation would ever end. Topic streams and tenant streams alike.
func TestTokenRevokedWhileItsStreamOpensIsRefused(t *testing.T) {
	for _, path := range []string{"/v1/tenants/acme/topics/orders/watch", "/v1/tenants/acme/watch?pattern=*"} {
		t.Run(path, func(t *testing.T) {
			inside, release := make(chan struct{}), make(chan struct{})
			held := false
			base := startServer(t, server.Hooks{HTTP: httpapi.Hooks{AfterRegister: func(string, string) {
				if !held {
					held = true
					close(inside)
					<-release
				}
			}}}, func(c *server.Config) { c.Dev, c.AdminKey = false, adminKey })
			createTenant(t, base, "acme")
			token := mint(t, base, "acme", `{"subscribe":["*"]}`)
			got := make(chan int, 1)
			go func() {
				resp, err := http.Get(base + path + sep(path) + "access_token=" + token)
				if err != nil {
					got <- 0
					return
				}
				resp.Body.Close()
				got <- resp.StatusCode
			}()
			<-inside // registered with its hub, its credential not yet held
			if st, b := admin(t, base, "DELETE", "acme/tokens/"+jti(t, token), ""); st != http.StatusNoContent {
				t.Fatalf("revoke: %d %s", st, b)
			}
			close(release)
			if st := <-got; st != http.StatusUnauthorized {
				t.Fatalf("the stream of a token revoked as it opened answered %d, want 401", st)
			}
		})
	}
}

func sep(path string) string {
	if strings.Contains(path, "?") {
		return "&"
	}
	return "?"
}

// jti reads a token's id, unverified.
func jti(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c struct{ Jti string }
	if err != nil || json.Unmarshal(b, &c) != nil || c.Jti == "" {
		t.Fatalf("no jti in %s", b)
	}
	return c.Jti
}
