package tests

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/edgehub/edgehub/pgtest"
)

// A second serve on a data directory that a running server holds exits
// non-zero at once, naming the directory, and the running one goes on
// answering as before.
func TestSecondServeOnADirectoryInUseExits(t *testing.T) {
	if pgtest.Enabled() {
		t.Skip("a data directory is SQLite's; processes on one Postgres database share it by design (scaleout_test.go)")
	}
	dir := t.TempDir()
	p := start(t, dir)
	if seq := p.publish(t, "x", `1`); seq != 1 {
		t.Fatalf("seq %d", seq)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--dev", "--addr", "127.0.0.1:0", "--data", dir).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatal("the second serve did not exit")
	}
	if err == nil || !strings.Contains(string(out), dir) || !strings.Contains(string(out), "in use") {
		t.Fatalf("second serve: %v, output %q; want a non-zero exit naming %s", err, out, dir)
	}
	if seq := p.publish(t, "x", `2`); seq != 2 {
		t.Fatalf("the first server answered seq %d after the second tried, want 2", seq)
	}
}
