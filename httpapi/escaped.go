package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/refusal"
)

// escapedKey marks a request routed on its escaped path; its value is the
// request's own URL, handed back to the route's handler.
type escapedKey struct{}

// routeEscaped lets a path segment hold an escaped '/' (a topic such as
// https://example.com/books/1 is sent as https:%2F%2Fexample.com%2Fbooks%2F1):
// the router matches the decoded path, where that '/' would split the
// segment. A request whose path needed such an escape (RawPath set) is
// routed on its escaped path instead, and unescaped again by
// unescapeParams; every other request is routed as it came, its
// parameters already decoded.
func routeEscaped(router http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawPath == "" {
			router.ServeHTTP(w, r)
			return
		}
		u := *r.URL
		u.Path, u.RawPath = r.URL.EscapedPath(), ""
		routed := r.WithContext(context.WithValue(r.Context(), escapedKey{}, r.URL))
		routed.URL = &u
		router.ServeHTTP(w, routed)
	})
}

// unescapeParams gives a handler of a request that routeEscaped routed on
// its escaped path the request's own URL and its parameters decoded; one
// that does not decode is 400 invalid_name.
func unescapeParams(h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		own, ok := r.Context().Value(escapedKey{}).(*url.URL)
		if !ok {
			h(w, r, ps)
			return
		}
		r.URL = own
		for i := range ps {
			v, err := url.PathUnescape(ps[i].Value)
			if err != nil {
				writeError(w, refusal.New(refusal.InvalidName, "path segment %q does not decode", ps[i].Value))
				return
			}
			ps[i].Value = v
		}
		h(w, r, ps)
	}
}
