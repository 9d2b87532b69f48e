package backlog

import (
	"context"
	"errors"
	"fmt"
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
