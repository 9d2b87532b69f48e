package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"

	"github.com/edgehub/edgehub/durable"
	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/mercure"
	"github.com/edgehub/edgehub/metrics"
)

// Every route the server registers, its own and those its protocols
// (Durable Streams, Mercure) mount, is an operation of the document it
// serves, and every operation of the document is a route. In dev mode it
// registers them all (the console's exist only there or with an admin
// key); --mercure-tenant's /.well-known/mercure is the tenant hub's
// operation at another path, and is not listed.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	s := httpapi.New(httpapi.Config{Dev: true}, httpapi.Deps{Metrics: metrics.New(),
		Protocols: []httpapi.Protocol{durable.New(durable.Config{}), mercure.New(mercure.Config{Subscriptions: true}, mercure.Hooks{})}}, httpapi.Hooks{})
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil))
	body, _ := io.ReadAll(w.Result().Body)
	doc, err := libopenapi.NewDocument(body)
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	var documented, registered []string
	for path, item := range m.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	param := regexp.MustCompile(`:([a-z]+)`)
	for _, r := range s.Routes() {
		registered = append(registered, param.ReplaceAllString(r, "{$1}"))
	}
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in openapi.yaml", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("openapi.yaml has %s, which is no route", d)
		}
	}
}

// Without dev mode and without an admin key no one may see the console's
// data, so it does not exist: every route of it is the unknown route's
// 404 not_found. (serve refuses to start so; a server built in process
// may be.)
func TestConsoleIsOffWithoutDevOrAdminKey(t *testing.T) {
	s := httpapi.New(httpapi.Config{}, httpapi.Deps{Metrics: metrics.New()}, httpapi.Hooks{})
	for _, path := range []string{"/console", "/console/console.js", "/console/api/mode", "/console/api/topics/acme/orders"} {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), `"not_found"`) {
			t.Errorf("GET %s: %d %s, want 404 not_found", path, w.Code, w.Body)
		}
	}
}
