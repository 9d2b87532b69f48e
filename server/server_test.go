package server_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/server"
)

func open(t *testing.T, dir string, dev bool) (*server.Server, error) {
	t.Helper()
	cfg := server.Defaults()
	cfg.Data, cfg.Dev, cfg.AdminKey = dir, dev, "k"
	return server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.Hooks{ManualTicks: true})
}

// A second server on a data directory that a running one holds refuses to
// start, naming the directory; once the first has stopped, it may.
func TestOneServerPerDataDirectory(t *testing.T) {
	dir := t.TempDir()
	first, err := open(t, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := open(t, dir, true); err == nil {
		second.Shutdown(context.Background())
		t.Fatal("a second server opened a data directory in use")
	} else if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("error %q does not name the directory in use", err)
	}
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := open(t, dir, true)
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	again.Shutdown(context.Background())
}

// A data directory remembers the mode that first served it: dev-mode data
// (any tenant, no credentials) is never served in production, nor the
// other way round.
func TestDataDirectoryKeepsItsMode(t *testing.T) {
	for _, first := range []bool{true, false} {
		dir := t.TempDir()
		s, err := open(t, dir, first)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s, err := open(t, dir, !first); err == nil {
			s.Shutdown(context.Background())
			t.Fatalf("a directory first served with dev=%v opened with dev=%v", first, !first)
		} else if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "-mode data") {
			t.Errorf("error %q does not name the directory and its mode", err)
		}
		s, err = open(t, dir, first)
		if err != nil {
			t.Fatalf("reopen in its own mode: %v", err)
		}
		s.Shutdown(context.Background())
	}
}
