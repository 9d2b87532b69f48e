package backlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/edgehub/edgehub/auth"
)

// An issuer is registered (created), replaced under its name with a new
// version, listed by name, and removed; a tenant that was never created
// has none, a 17th is refused, and a removal of one never registered is
// ErrNoIssuer. Deleting the tenant removes its issuers, so a tenant
// created later under the name trusts nobody.
func TestIssuersAreRegisteredReplacedAndRemoved(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	iss := auth.Issuer{Name: "idp", Issuer: "https://idp.test", Audience: "edgehub", JWKSURL: "https://idp.test/jwks"}
	first, created, err := l.PutIssuer(ctx, "acme", iss)
	if err != nil || !created || first.Version == 0 {
		t.Fatalf("first registration: %+v created %v: %v", first, created, err)
	}
	iss.JWKSURL = "https://idp.test/keys"
	second, created, err := l.PutIssuer(ctx, "acme", iss)
	if err != nil || created || second.Version == first.Version {
		t.Fatalf("replacement: version %d (was %d) created %v: %v", second.Version, first.Version, created, err)
	}
	if _, _, err := l.PutIssuer(ctx, "ghost", iss); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("an issuer of a tenant never created: %v, want ErrNoTenant", err)
	}
	for i := 1; i < MaxIssuers; i++ {
		if _, _, err := l.PutIssuer(ctx, "acme", auth.Issuer{Name: fmt.Sprintf("n%02d", i), JWKSURL: "https://idp.test/jwks"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := l.PutIssuer(ctx, "acme", auth.Issuer{Name: "one-too-many", JWKSURL: "https://idp.test/jwks"}); !errors.Is(err, ErrTooManyIssuers) {
		t.Fatalf("issuer %d: %v, want ErrTooManyIssuers", MaxIssuers+1, err)
	}
	if _, _, err := l.PutIssuer(ctx, "acme", iss); err != nil {
		t.Fatalf("replacing one at the cap: %v", err)
	}
	list, err := l.Issuers(ctx, "acme")
	if err != nil || len(list) != MaxIssuers || list[0].Name != "idp" || list[0].JWKSURL != "https://idp.test/keys" || list[0].Audience != "edgehub" {
		t.Fatalf("the list: %d issuers, first %+v: %v", len(list), list[0], err)
	}
	if err := l.DeleteIssuer(ctx, "acme", "idp"); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteIssuer(ctx, "acme", "idp"); !errors.Is(err, ErrNoIssuer) {
		t.Fatalf("a second removal: %v, want ErrNoIssuer", err)
	}
	if list, _ := l.Issuers(ctx, "acme"); len(list) != MaxIssuers-1 {
		t.Fatalf("%d issuers after a removal, want %d", len(list), MaxIssuers-1)
	}
	if err := l.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	mustTenant(t, l, "acme")
	if list, err := l.Issuers(ctx, "acme"); err != nil || len(list) != 0 {
		t.Fatalf("a tenant made again under the name trusts %d issuers: %v", len(list), err)
	}
}

// A revoked token id stays revoked until its time is up and the purge
// runs; one revoked with no end is kept; the revocations of one tenant
// are not another's, and go with their tenant.
func TestRevocationsLastUntilPurged(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	mustTenant(t, l, "globex")
	now := time.Now()
	if err := l.Revoke(ctx, "acme", "short", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := l.Revoke(ctx, "acme", "forever", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Revoke(ctx, "ghost", "j", now); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("a revocation for a tenant never created: %v, want ErrNoTenant", err)
	}
	revoked := func(tenant, jti string) bool {
		t.Helper()
		ok, err := l.Revoked(ctx, tenant, jti)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !revoked("acme", "short") || !revoked("acme", "forever") || revoked("globex", "short") || revoked("acme", "never") {
		t.Fatal("revocations are not the tenant's own")
	}
	if n, err := l.PurgeRevoked(ctx, now.Add(30*time.Second)); err != nil || n != 0 || !revoked("acme", "short") {
		t.Fatalf("a purge before the end purged %d: %v", n, err)
	}
	if n, err := l.PurgeRevoked(ctx, now.Add(2*time.Minute)); err != nil || n != 1 || revoked("acme", "short") || !revoked("acme", "forever") {
		t.Fatalf("a purge after the end purged %d: %v", n, err)
	}
	if err := l.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	mustTenant(t, l, "acme")
	if revoked("acme", "forever") {
		t.Fatal("a tenant made again under the name inherits a revocation")
	}
}

// An issuer's policy (max_ttl as given, require_exp, actions) is stored
// with it and read back, replaced with it; an issuer written before the
// policy columns existed reads as it behaved: the server's cap, exp
// required, both actions.
func TestIssuerPolicyIsStored(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	byName := func() map[string]auth.Issuer {
		t.Helper()
		list, err := l.Issuers(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]auth.Issuer{}
		for _, iss := range list {
			out[iss.Name] = iss
		}
		return out
	}
	sub := auth.Issuer{Name: "sub", Issuer: "app", JWKSURL: "https://idp.test/jwks", MaxTTL: "90m", ExpOptional: true, Actions: auth.SubscribeOnly()}
	def := auth.Issuer{Name: "def", Issuer: "idp", JWKSURL: "https://idp.test/jwks", Actions: auth.DefaultActions()}
	for _, iss := range []auth.Issuer{sub, def} {
		if _, _, err := l.PutIssuer(ctx, "acme", iss); err != nil {
			t.Fatal(err)
		}
	}
	same := func(got, want auth.Issuer) bool {
		return got.MaxTTL == want.MaxTTL && got.ExpOptional == want.ExpOptional && slices.Equal(got.Actions, want.Actions)
	}
	got := byName()
	if !same(got["sub"], sub) || !same(got["def"], def) {
		t.Fatalf("read back %+v and %+v", got["sub"], got["def"])
	}
	sub.MaxTTL, sub.ExpOptional, sub.Actions = "0s", false, auth.DefaultActions()
	if _, created, err := l.PutIssuer(ctx, "acme", sub); err != nil || created {
		t.Fatalf("replace: created %v: %v", created, err)
	}
	if got := byName()["sub"]; !same(got, sub) {
		t.Fatalf("replaced, read back %+v", got)
	}
	if _, err := l.exec(ctx, `INSERT INTO issuers (tenant, name, issuer, audience, jwks_url, alg, key, version)
		VALUES ('acme', 'old', 'old', '', 'https://idp.test/jwks', '', '', 1)`); err != nil {
		t.Fatal(err)
	}
	if got := byName()["old"]; !same(got, auth.Issuer{Actions: auth.DefaultActions()}) {
		t.Fatalf("an issuer of before: %+v", got)
	}
}

// A revoked token id stays revoked while a token with it can still be
// accepted (invariant 5 of plan 051): a revocation lasts the server's
// cap, or an issuer's longer one; registering an issuer with a longer
// cap lengthens the tenant's revocations, one that accepts tokens
// without exp (or uncapped) keeps them for good, and later revocations
// are for good too; another tenant's are untouched.
func TestRevocationsOutliveTheLongestLifetime(t *testing.T) {
	l := openTest(t)
	ctx := context.Background()
	mustTenant(t, l, "acme")
	mustTenant(t, l, "globex")
	until := func(tenant, jti string) time.Time {
		t.Helper()
		var at int64
		if err := l.read.QueryRowContext(ctx, l.q(`SELECT until FROM revoked_tokens WHERE tenant = ? AND jti = ?`), tenant, jti).Scan(&at); err != nil {
			t.Fatalf("revocation %s of %s: %v", jti, tenant, err)
		}
		if at == 0 {
			return time.Time{}
		}
		return time.Unix(0, at)
	}
	now := time.Now()
	server := now.Add(24*time.Hour + auth.Leeway)
	put := func(iss auth.Issuer) {
		t.Helper()
		iss.JWKSURL, iss.Actions = "https://idp.test/jwks", auth.DefaultActions()
		if _, _, err := l.PutIssuer(ctx, "acme", iss); err != nil {
			t.Fatal(err)
		}
	}
	put(auth.Issuer{Name: "short", Issuer: "short", MaxTTL: "2h"})
	put(auth.Issuer{Name: "server", Issuer: "server"})
	if err := l.Revoke(ctx, "acme", "a", server); err != nil {
		t.Fatal(err)
	}
	if err := l.Revoke(ctx, "globex", "g", server); err != nil {
		t.Fatal(err)
	}
	if got := until("acme", "a"); !got.Equal(time.Unix(0, server.UnixNano())) {
		t.Fatalf("revoked under caps of 2h and the server's: until %v, want the server's %v", got, server)
	}
	put(auth.Issuer{Name: "month", Issuer: "month", MaxTTL: "720h"})
	if got := until("acme", "a"); got.Before(now.Add(720 * time.Hour)) {
		t.Fatalf("an issuer of 720h registered: until %v", got)
	}
	if err := l.Revoke(ctx, "acme", "b", server); err != nil {
		t.Fatal(err)
	}
	if got := until("acme", "b"); got.Before(now.Add(720 * time.Hour)) {
		t.Fatalf("revoked beside an issuer of 720h: until %v", got)
	}
	put(auth.Issuer{Name: "static", Issuer: "static", ExpOptional: true})
	for _, jti := range []string{"a", "b"} {
		if got := until("acme", jti); !got.IsZero() {
			t.Fatalf("an issuer without exp registered: %s until %v, want for good", jti, got)
		}
	}
	if err := l.Revoke(ctx, "acme", "c", server); err != nil {
		t.Fatal(err)
	}
	if got := until("acme", "c"); !got.IsZero() {
		t.Fatalf("revoked beside an issuer without exp: until %v, want for good", got)
	}
	if got := until("globex", "g"); !got.Equal(time.Unix(0, server.UnixNano())) {
		t.Fatalf("another tenant's revocation: until %v", got)
	}
	if n, err := l.PurgeRevoked(ctx, now.Add(100*365*24*time.Hour)); err != nil || n != 1 {
		t.Fatalf("a purge a century on purged %d (want globex's one): %v", n, err)
	}
}
