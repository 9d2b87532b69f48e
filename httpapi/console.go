package httpapi

import (
	"embed"
	"fmt"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/edgehub/edgehub/refusal"
)

// consoleFiles are the console's page, script, style and icon: plain files, no
// build step, so the binary serves the whole console offline.
//
//go:embed console
var consoleFiles embed.FS

// consoleCSP lets the page load scripts and styles, and connect, only to
// the hub's own origin, with no inline script and no framing: event data
// that slipped into the document as markup still could not run.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// consoleAssets maps each of the console's paths to its embedded file.
var consoleAssets = []struct{ path, file, contentType string }{
	{"/console", "console/index.html", "text/html; charset=utf-8"},
	{"/console/console.js", "console/console.js", "text/javascript; charset=utf-8"},
	{"/console/console.css", "console/console.css", "text/css; charset=utf-8"},
	{"/console/favicon.svg", "console/favicon.svg", "image/svg+xml"},
}

// consoleStreams are the streams open on this server, as the console
// shows them: on one topic, on its tenant and in all.
type consoleStreams struct {
	Topic  int `json:"topic"`
	Tenant int `json:"tenant"`
	All    int `json:"all"`
}

// consoleTopic is the console API's answer for a topic: a fixed set of
// fields, so its size does not depend on the topic.
type consoleTopic struct {
	Tenant  string         `json:"tenant"`
	Topic   string         `json:"topic"`
	Head    int64          `json:"head"`
	Streams consoleStreams `json:"streams"`
}

// consoleRoutes adds the console's routes, but only where whoever may
// reach it is entitled to all it shows: in dev mode, or with an admin key
// (which its data calls then need). Otherwise they do not exist and the
// router answers 404 not_found.
func (s *Server) consoleRoutes(route func(method, path string, h httprouter.Handle)) {
	if !s.cfg.Dev && s.cfg.AdminKey == "" {
		return
	}
	for _, a := range consoleAssets {
		body, err := consoleFiles.ReadFile(a.file)
		if err != nil {
			panic(fmt.Sprintf("console asset %s is not embedded: %v", a.file, err))
		}
		contentType := a.contentType
		route(http.MethodGet, a.path, consoleHeaders("no-cache", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(http.StatusOK)
			w.Write(body) //nolint:errcheck // the client may be gone; nothing to do
		}))
	}
	// The API's answers, refusals included, are never cached.
	route(http.MethodGet, "/console/api/mode", consoleHeaders("no-store", s.consoleMode))
	route(http.MethodGet, "/console/api/topics/:tenant/:topic", consoleHeaders("no-store", s.topicRoute(s.consoleTopic)))
}

// consoleHeaders puts the console's security headers, and cacheControl,
// on every answer of h.
func consoleHeaders(cacheControl string, h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", consoleCSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY") // frame-ancestors 'none' for browsers that predate it
		hd.Set("Cache-Control", cacheControl)
		h(w, r, p)
	}
}

// consoleMode tells the page whether it needs the admin key, and checks
// one it was given: the page asks for the key when this is 401.
func (s *Server) consoleMode(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if !s.consoleAllowed(w, r) {
		return
	}
	mode := "admin"
	if s.cfg.Dev {
		mode = "dev"
	}
	writeJSON(w, http.StatusOK, map[string]string{"mode": mode})
}

// consoleTopic answers a topic's head, read from the log (the truth, not
// the hub, which is never asked to wait for anyone), and the streams open
// on it, on its tenant and in all, counted in one pass over the server's
// own set of streams.
// Its names are checked (topicRoute) before its credentials.
func (s *Server) consoleTopic(w http.ResponseWriter, r *http.Request, tenant, topic string) {
	if !s.consoleAllowed(w, r) {
		return
	}
	if !s.cfg.Dev {
		if _, ok := s.adminTenant(w, r, tenant); !ok {
			return
		}
	}
	head, err := s.deps.Log.Head(r.Context(), tenant, topic)
	if err != nil {
		s.deps.Logger.Error("console head", "tenant", tenant, "topic", topic, "err", err)
		writeError(w, refusal.New(refusal.Unavailable, "the topic's head could not be read"))
		return
	}
	writeJSON(w, http.StatusOK, consoleTopic{Tenant: tenant, Topic: topic, Head: head, Streams: s.countStreams(tenant, topic)})
}

// consoleAllowed lets dev mode in, and otherwise the admin key as a bearer
// token, throttled as the admin API's (adminAllowed); it answers and
// reports false for anyone else.
func (s *Server) consoleAllowed(w http.ResponseWriter, r *http.Request) bool {
	return s.cfg.Dev || s.adminAllowed(w, r, "the console needs the admin key as a bearer token")
}

// countStreams counts the open streams of this server on tenant/topic, on
// tenant and in all. The set holds at most --max-streams entries and the
// pass allocates nothing.
func (s *Server) countStreams(tenant, topic string) consoleStreams {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := consoleStreams{All: len(s.streams)}
	for st := range s.streams {
		if st.tenant == tenant {
			c.Tenant++
			if st.topic == topic {
				c.Topic++
			}
		}
	}
	return c
}
