package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/edgehub/edgehub/metrics"
)

// openapiModel parses the embedded document and builds its model, which
// resolves every $ref.
func openapiModel(t *testing.T) (libopenapi.Document, *libopenapi.DocumentModel[v3.Document]) {
	t.Helper()
	doc, err := libopenapi.NewDocument(openapiYAML)
	if err != nil {
		t.Fatalf("the document does not parse: %v", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("the document's model does not build: %v", err)
	}
	return doc, m
}

// The embedded document is OpenAPI 3.1 and valid against its schema, and
// every $ref in it resolves.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	doc, _ := openapiModel(t)
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("no validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, s := range e.SchemaValidationErrors {
				t.Errorf("  %s (%s, %s)", s.Reason, s.FieldPath, s.KeywordLocation)
			}
		}
	}
}

// GET /openapi.yaml answers the embedded bytes as application/yaml with an
// ETag, and 304 to a client that sends the ETag back (alone, in a list, or
// weak).
func TestOpenAPIDocumentIsServedAndCacheable(t *testing.T) {
	h := New(Config{}, Deps{Metrics: metrics.New()}, Hooks{}).Handler()
	get := func(ifNoneMatch string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil)
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	w := get("")
	etag := w.Header().Get("ETag")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/yaml" ||
		w.Body.String() != string(openapiYAML) || etag == "" || w.Header().Get("Cache-Control") == "" {
		t.Fatalf("GET /openapi.yaml: %d %v, %d bytes", w.Code, w.Header(), w.Body.Len())
	}
	for _, inm := range []string{etag, `"other", ` + etag, "W/" + etag, "*"} {
		if w := get(inm); w.Code != http.StatusNotModified || w.Body.Len() != 0 || w.Header().Get("ETag") != etag {
			t.Errorf("If-None-Match %s: %d, %d bytes", inm, w.Code, w.Body.Len())
		}
	}
	if w := get(`"other"`); w.Code != http.StatusOK {
		t.Errorf("another ETag: %d", w.Code)
	}
}
