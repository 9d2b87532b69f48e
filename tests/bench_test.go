package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// benchLine is the part of an `edgeload bench --json` line these tests read.
type benchLine struct {
	Summary    bool             `json:"summary"`
	Target     string           `json:"target"`
	Scenario   string           `json:"scenario"`
	Violations map[string]int64 `json:"violations"`
	Error      string           `json:"error"`
}

// buildBench builds edgeload and edgeceiling into dir.
func buildBench(t *testing.T, dir string) {
	t.Helper()
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "../cmd/edgeload", "../cmd/edgeceiling")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build edgeload and edgeceiling: %v\n%s", err, out)
	}
}

// runBench runs `edgeload bench` (built into dir) with args against the
// binary under test at the tiny scale, and returns its measurements and
// its exit error.
func runBench(t *testing.T, dir string, args ...string) ([]benchLine, error) {
	t.Helper()
	out := t.TempDir()
	jsonFile := filepath.Join(out, "bench.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "edgeload"), append([]string{"bench",
		"--bin", binary, "--ceiling", filepath.Join(dir, "edgeceiling"), "--scale", "tiny", "--rounds", "1",
		"--json", jsonFile, "--svg", filepath.Join(out, "fanout.svg"), "--edgehub-args", "--idle-after 1s"}, args...)...)
	// A race-enabled server sleeps a second at exit, for reports that
	// other goroutines might still print, by default; its races are
	// reported as they happen, and edgeload fails a server that exits
	// non-zero.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	printed, runErr := cmd.CombinedOutput()
	t.Logf("edgeload bench %v:\n%s", args, printed)
	f, err := os.Open(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []benchLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l benchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("JSON line %q: %v", sc.Text(), err)
		}
		if !l.Summary {
			lines = append(lines, l)
		}
	}
	return lines, runErr
}

// The benchmark command runs every scenario against the real binary at a
// tiny scale and checks every delivery as it measures. This asserts that
// correctness only; the numbers it prints are not checked.
func TestBench(t *testing.T) {
	dir := t.TempDir()
	buildBench(t, dir)

	// Edgehub's streams get every event once, in order, with seq equal to
	// the publisher's counter, and its answers number the events 1..n;
	// the ceiling's streams get every event once, in order.
	t.Run("edgehub", func(t *testing.T) {
		lines, err := runBench(t, dir, "--targets", "edgehub,ceiling")
		if err != nil {
			t.Fatalf("edgeload bench failed: %v", err)
		}
		var ran []string
		for _, l := range lines {
			if l.Error != "" || len(l.Violations) > 0 {
				t.Errorf("%s on %s: error %q, violations %v", l.Scenario, l.Target, l.Error, l.Violations)
			}
			ran = append(ran, l.Target+" "+l.Scenario)
		}
		for _, s := range []string{"publish1", "publish16", "topics16", "tenants16", "batch", "fanout", "idle", "catchup", "topics", "tenant-idle"} {
			if !slices.Contains(ran, "edgehub "+s) {
				t.Errorf("no edgehub measurement of %s", s)
			}
		}
		if !slices.Contains(ran, "ceiling fanout") {
			t.Error("no ceiling measurement of fanout")
		}
	})

	// With a Centrifugo binary at hand (on PATH, or where go install puts
	// it), the same command runs every scenario through it too. A peer's
	// violations are its own and only logged; the run must work.
	t.Run("centrifugo", func(t *testing.T) {
		bin, err := exec.LookPath("centrifugo")
		if err != nil {
			home, _ := os.UserHomeDir()
			bin = filepath.Join(home, "go", "bin", "centrifugo")
			if _, err := os.Stat(bin); err != nil {
				t.Skip("no centrifugo binary (go install github.com/centrifugal/centrifugo/v6@v6.9.1)")
			}
		}
		lines, err := runBench(t, dir, "--targets", "centrifugo", "--centrifugo", bin)
		if err != nil {
			t.Fatalf("edgeload bench failed: %v", err)
		}
		if len(lines) == 0 {
			t.Fatal("no measurements")
		}
		for _, l := range lines {
			if l.Error != "" {
				t.Errorf("%s on %s: %s", l.Scenario, l.Target, l.Error)
			}
			if len(l.Violations) > 0 {
				t.Logf("%s on %s: violations %v", l.Scenario, l.Target, l.Violations)
			}
		}
	})
}
