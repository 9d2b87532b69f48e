package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/edgehub/edgehub/loopback"
)

// servePprof serves /debug/pprof on its own listener at addr, which must
// be a loopback address: a profile shows what the process holds, so it is
// never on the API's address nor reachable from another machine. The
// returned server is closed at Shutdown.
func servePprof(addr string, logger *slog.Logger) (*http.Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("bad --pprof-addr %q: %w", addr, err)
	}
	if !loopback.Host(host) {
		return nil, fmt.Errorf("--pprof-addr only listens on a loopback address, not %q", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --pprof-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Error("pprof server", "addr", addr, "err", err)
		}
	}()
	logger.Info("serving profiles", "addr", ln.Addr().String())
	return srv, nil
}
