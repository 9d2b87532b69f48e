package mercure

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"

	"github.com/edgehub/edgehub/httpapi"
	"github.com/edgehub/edgehub/metrics"
)

// Every route the protocol mounts under a tenant is an operation of the
// server's OpenAPI document, and every operation the document has at a
// Mercure hub's path is a route it mounts. The well-known path of
// --mercure-tenant is the same operation at another path, and is not
// listed.
func TestOpenAPICoversHubRoutes(t *testing.T) {
	s := httpapi.New(httpapi.Config{Dev: true}, httpapi.Deps{Metrics: metrics.New(), Protocols: []httpapi.Protocol{New(Config{})}}, httpapi.Hooks{})
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
	var documented, mounted []string
	for path, item := range m.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			if strings.HasSuffix(path, Path) {
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	param := regexp.MustCompile(`:([a-z]+)`)
	for _, r := range s.Routes() {
		if strings.HasSuffix(r, Path) {
			mounted = append(mounted, param.ReplaceAllString(r, "{$1}"))
		}
	}
	slices.Sort(documented)
	slices.Sort(mounted)
	if len(mounted) == 0 || !slices.Equal(documented, mounted) {
		t.Fatalf("mounted %v, documented %v", mounted, documented)
	}
}
