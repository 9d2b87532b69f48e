package tests

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// cli runs the edgehub binary with stdin and returns its stdout, stderr
// and exit code.
func cli(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), 0
}

// publish with - publishes one event when stdin holds one JSON value, on
// one line or several, and a batch when it holds several lines of them.
func TestCLIPublishFromStdin(t *testing.T) {
	p := start(t, t.TempDir())
	for _, c := range []struct {
		stdin, want string
	}{
		{"{\"a\":1}\n", `"seq":1`},
		{"{\n  \"a\": 2\n}\n", `"seq":2`},
		{"{\"a\":3}\n{\"a\":4}\n", `"first":3,"last":4`},
	} {
		out, errOut, code := cli(t, c.stdin, "publish", "acme/x", "-", "--server", p.base)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Fatalf("publish %q: exit %d, stdout %q, stderr %q; want %s", c.stdin, code, out, errOut, c.want)
		}
	}
}

// A wrong command line gets its error first, a pointer to the help, and
// exit code 2, not the whole help; a refusal by the server exits 1.
func TestCLIUsageErrorsAreShort(t *testing.T) {
	for _, args := range [][]string{{"publish"}, {"frobnicate"}, {"watch", "acme/x", "--after", "many"}} {
		out, errOut, code := cli(t, "", args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "edgehub: error: ") || !strings.Contains(lines[1], "--help") {
			t.Fatalf("edgehub %v: exit %d, stdout %q, stderr %q; want exit 2 and two lines on stderr", args, code, out, errOut)
		}
	}
	p := start(t, t.TempDir())
	if _, errOut, code := cli(t, "", "publish", "acme/x", "not json", "--server", p.base); code != 1 || !strings.Contains(errOut, "invalid_json") {
		t.Fatalf("a refused publish: exit %d, stderr %q; want exit 1 naming invalid_json", code, errOut)
	}
	if out, _, code := cli(t, "", "--help"); code != 0 || !strings.Contains(out, "Exit codes: 0 success") {
		t.Fatalf("--help: exit %d without the exit codes:\n%s", code, out)
	}
}

// version says what the binary is, from what the Go toolchain recorded.
func TestCLIVersion(t *testing.T) {
	out, errOut, code := cli(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "edgehub ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
