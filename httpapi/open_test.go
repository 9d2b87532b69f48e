package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/limits"
	"github.com/edgehub/edgehub/refusal"
	"github.com/edgehub/edgehub/selector"
)

// costly is a selection of a given heap that counts its compilations.
type costly struct {
	*selector.Set
	heap, work int64
	compiled   *int
}

func (c costly) Heap() int64 { return c.heap }

func (c costly) Work() int64 { return c.work }

func (c costly) Compile() *refusal.Error {
	*c.compiled++
	return nil
}

// A tenant stream takes its place and its selection's heap before its
// selection is compiled, so that a request without a place makes the
// server compile nothing: an anonymous one past its caps, or one whose
// selectors do not fit its budget. An anonymous stream's heap comes from
// the anonymous budgets, a token stream's from the read budget; release
// gives both back. The same of the selection's matching work, from the
// work budgets.
func TestNothingIsCompiledWithoutAPlace(t *testing.T) {
	s := &Server{deps: Deps{
		Limits:             limits.New(limits.Config{MaxTenantStreams: 5, MaxTenantAnonymousStreams: 1}),
		ReadBudget:         limits.NewBudget(1000, 0, "read answers"),
		AnonymousSelectors: limits.NewBudget(500, 0, "anonymous"), AnonymousByClient: limits.NewBudget(500, 0, "anonymous"),
		MatchWork:     limits.NewBudget(100, 0, "work"),
		AnonymousWork: limits.NewBudget(50, 0, "anonymous work"), AnonymousWorkByClient: limits.NewBudget(50, 0, "anonymous work"),
	}}
	set, aerr := selector.Parse(nil, nil, auth.Everything())
	if aerr != nil {
		t.Fatal(aerr)
	}
	compiled := 0
	sel := func(heap int64) Selection { return costly{Set: set, heap: heap, work: heap / 10, compiled: &compiled} }
	r := httptest.NewRequest("GET", "/", nil)
	anonymous := Access{Tenant: auth.Tenant{Name: "acme"}, Anonymous: true}
	withToken := Access{Tenant: auth.Tenant{Name: "acme"}}
	if _, aerr := s.openTenantStream(r, anonymous, costly{Set: set, heap: 1, work: 51, compiled: &compiled}); aerr == nil || aerr.Code != refusal.Overloaded || compiled != 0 {
		t.Fatalf("an anonymous stream past its matching work: %v, compiled %d", aerr, compiled)
	}
	release, aerr := s.openTenantStream(r, anonymous, sel(400))
	if aerr != nil || compiled != 1 || s.deps.AnonymousSelectors.Held() != 400 || s.deps.AnonymousByClient.Held() != 400 || s.deps.ReadBudget.Held() != 0 ||
		s.deps.AnonymousWork.Held() != 40 || s.deps.MatchWork.Held() != 0 {
		t.Fatalf("an anonymous stream: %v, compiled %d", aerr, compiled)
	}
	if _, aerr := s.openTenantStream(r, anonymous, sel(10)); aerr == nil || aerr.Code != refusal.TooManyStreams || compiled != 1 {
		t.Fatalf("an anonymous stream past its cap: %v, compiled %d", aerr, compiled)
	}
	if _, aerr := s.openTenantStream(r, withToken, sel(1001)); aerr == nil || aerr.Code != refusal.Overloaded || aerr.RetryAfter <= 0 || compiled != 1 {
		t.Fatalf("a token stream past its budget: %v, compiled %d", aerr, compiled)
	}
	if open, _ := s.deps.Limits.TenantStreams("acme"); open != 0 || s.deps.ReadBudget.Held() != 0 {
		t.Fatalf("a refused stream holds %d places, %d bytes", open, s.deps.ReadBudget.Held())
	}
	tokenRelease, aerr := s.openTenantStream(r, withToken, sel(1000))
	if aerr != nil || compiled != 2 || s.deps.ReadBudget.Held() != 1000 || s.deps.MatchWork.Held() != 100 {
		t.Fatalf("a token stream with the anonymous budget full: %v", aerr)
	}
	release()
	tokenRelease()
	release()
	if s.deps.AnonymousSelectors.Held()+s.deps.AnonymousByClient.Held()+s.deps.ReadBudget.Held()+
		s.deps.MatchWork.Held()+s.deps.AnonymousWork.Held()+s.deps.AnonymousWorkByClient.Held() != 0 {
		t.Fatal("released streams still hold bytes")
	}
}
