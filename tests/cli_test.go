package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// cli runs the edgehub binary with stdin and returns its stdout, stderr
// and exit code.
func cli(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return cliRun(t, nil, nil, stdin, args...)
}

// cliRun is cli with variables added to the environment and, when stdout
// is not nil, the command's stdout going there (a *os.File is handed to
// the command as it is, so it writes to a real file); the stdout returned
// is then empty.
func cliRun(t *testing.T, env []string, stdout io.Writer, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdout != nil {
		cmd.Stdout = stdout
	}
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
	for _, c := range []struct {
		args []string
		hint string // what the error must say
	}{
		{[]string{"publish"}, ""},
		{[]string{"frobnicate"}, ""},
		{[]string{"watch", "acme/x", "--after", "many"}, ""},
		{[]string{"watch", "acme/x", "--after=-1"}, "0 (the whole backlog) or more"},
		{[]string{"watch", "acme/x", "--topic", "y"}, "select a tenant stream's topics"},
		{[]string{"watch", "acme", "--snapshot"}, "a tenant stream (TENANT without /TOPIC) has none"},
		{[]string{"watch", "acme/"}, "is not TENANT/TOPIC or TENANT"},
		{[]string{"events", "acme/x", "--after=-2"}, "0 (the whole backlog) or more"},
		{[]string{"publish", "acme/x", "{}", "--server", "127.0.0.1:8080"}, "give its scheme and host"},
		{[]string{"tenant", "get", "acme", "--server", "localhost:8080"}, "give its scheme and host"},
		{[]string{"health", "--server", "example.com"}, "give its scheme and host"},
	} {
		out, errOut, code := cli(t, "", c.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "edgehub: error: ") || !strings.Contains(lines[1], "--help") ||
			!strings.Contains(lines[0], c.hint) {
			t.Fatalf("edgehub %v: exit %d, stdout %q, stderr %q; want exit 2 and two lines on stderr saying %q", c.args, code, out, errOut, c.hint)
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

// publish with no event waits for none at a terminal: it is a usage
// error there (stdin a pty, made by script(1)); from a pipe the event is
// read from stdin, as with -.
func TestCLIPublishWithoutAnEvent(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("no script(1) to give the command a terminal")
	}
	p := start(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	out, err := exec.CommandContext(ctx, "script", "-qec", binary+" publish acme/x --server "+p.base, "/dev/null").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "no event: give its JSON as an argument, or pipe it in") {
		t.Fatalf("publish with no event at a terminal: %v, %q", err, out)
	}
	if out, errOut, code := cli(t, `{"piped":true}`, "publish", "acme/x", "--server", p.base); code != 0 || !strings.Contains(out, `"seq":1`) {
		t.Fatalf("publish with no event and one piped in: exit %d, %s %s", code, out, errOut)
	}
}

// version says what the binary is, from what the Go toolchain recorded.
func TestCLIVersion(t *testing.T) {
	out, errOut, code := cli(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "edgehub ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// The admin commands manage a tenant and mint its tokens, and the topic
// commands work with such a token: tenant create, get and rotate print
// the tenant with its secrets, token prints a token that publishes and
// reads, delete removes the tenant, and refusals exit 1 with their code.
func TestCLITenantsAndTokens(t *testing.T) {
	key := strings.Repeat("k", 32)
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0")
	env := []string{"EDGEHUB_SERVER=" + p.base, "EDGEHUB_ADMIN_KEY=" + key}
	run := func(wantCode int, args ...string) string {
		t.Helper()
		out, errOut, code := cliRun(t, env, nil, "", args...)
		if code != wantCode {
			t.Fatalf("edgehub %v: exit %d, stdout %q, stderr %q; want exit %d", args, code, out, errOut, wantCode)
		}
		if code != 0 {
			return errOut
		}
		return out
	}
	tenant := func(out string) map[string]string {
		t.Helper()
		var v map[string]string
		if err := json.Unmarshal([]byte(out), &v); err != nil || v["tenant"] != "acme" || v["signing_secret"] == "" ||
			!strings.HasPrefix(v["webhook_secret"], "whsec_") || len(v) != 3 {
			t.Fatalf("not a tenant: %q (%v)", out, err)
		}
		return v
	}
	created := tenant(run(0, "tenant", "create", "acme"))
	if got := tenant(run(0, "tenant", "get", "acme")); got["signing_secret"] != created["signing_secret"] {
		t.Fatalf("get: %v, created %v", got, created)
	}
	if got := tenant(run(0, "tenant", "rotate", "acme")); got["signing_secret"] == created["signing_secret"] ||
		got["webhook_secret"] == created["webhook_secret"] {
		t.Fatalf("rotate kept a secret: %v, created %v", got, created)
	}
	token := strings.TrimSpace(run(0, "token", "acme", "--publish", "orders", "--subscribe", "orders", "--ttl", "10m"))
	if strings.Count(token, ".") != 2 {
		t.Fatalf("token %q is no JWT", token)
	}
	if out := run(0, "publish", "acme/orders", `{"n":1}`, "--token", token); out != `{"seq":1,"duplicate":false}`+"\n" {
		t.Fatalf("publish with the token: %q", out)
	}
	if out := run(0, "publish", "acme/orders", `{"s":1}`, "--key", "k", "--token", token); !strings.Contains(out, `"seq":2`) {
		t.Fatalf("keyed publish: %q", out)
	}
	if errOut := run(1, "publish", "acme/orders", "1"); !strings.Contains(errOut, "unauthorized") {
		t.Fatalf("publish without a token: %q", errOut)
	}
	if errOut := run(1, "publish", "acme/refunds", "1", "--token", token); !strings.Contains(errOut, "forbidden") {
		t.Fatalf("publish outside the token: %q", errOut)
	}
	lines := strings.Split(strings.TrimSpace(run(0, "events", "acme/orders", "--token", token)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `{"seq":1,"type":"message","time":"`) || !strings.HasSuffix(lines[0], `"data":{"n":1}}`) {
		t.Fatalf("events: %q", lines)
	}
	if out := run(0, "state", "acme/orders", "--token", token); out != `{"seq":2,"state":{"k":{"s":1}}}`+"\n" {
		t.Fatalf("state: %q", out)
	}
	if errOut := run(1, "tenant", "get", "acme", "--admin-key", "wrong"); !strings.Contains(errOut, "unauthorized") {
		t.Fatalf("a wrong admin key: %q", errOut)
	}
	if out := run(0, "tenant", "delete", "acme"); out != "" {
		t.Fatalf("delete printed %q", out)
	}
	if errOut := run(1, "tenant", "get", "acme"); !strings.Contains(errOut, "unknown_tenant") {
		t.Fatalf("get a deleted tenant: %q", errOut)
	}
}

// events --all written to a file holds every envelope once, in order, and
// nothing else, while stderr, a terminal (script(1)'s pty), shows the
// replay's progress; with stderr a pipe, or into a pipe, the same command
// shows no bar. watch --after 0 into a file shows it too.
func TestCLIEventsAllToAFile(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("no script(1) to give the command a terminal")
	}
	p := start(t, t.TempDir())
	const n = 2500 // 25 pages of the server's default 100
	p.publishBatch(t, "x", 0, n, 10)
	want := fmt.Sprintf("%d/%d", n, n)
	path := filepath.Join(t.TempDir(), "events.ndjson")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	tty, err := exec.CommandContext(ctx, "script", "-qec", binary+" events acme/x --all --server "+p.base+" > "+path, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("events --all to a file: %v %s", err, tty)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkEnvelopes(t, string(b), n)
	if !strings.Contains(string(tty), want) {
		t.Fatalf("no progress on the terminal (want %q):\n%s", want, tty)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cliRun(t, nil, f, "", "events", "acme/x", "--all", "--server", p.base)
	f.Close()
	if code != 0 || errOut != "" {
		t.Fatalf("events --all to a file, stderr a pipe: exit %d, stderr %q; want no bar", code, errOut)
	}
	out, errOut, code := cliRun(t, nil, nil, "", "events", "acme/x", "--all", "--server", p.base)
	if code != 0 || errOut != "" {
		t.Fatalf("events --all into a pipe: exit %d, stderr %q; want no bar", code, errOut)
	}
	checkEnvelopes(t, out, n)

	// watch --after 0 into a file shows the same bar up to the head it
	// found, and goes on live.
	path = filepath.Join(t.TempDir(), "watch.ndjson")
	watch := exec.Command("script", "-qec", binary+" watch acme/x --after 0 --json --server "+p.base+" > "+path, "/dev/null")
	terminal := &lockedBuffer{}
	watch.Stdout, watch.Stderr = terminal, terminal
	// A group of its own: killing script alone would leave its shell and
	// the watch under it running after the test.
	watch.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(-watch.Process.Pid, syscall.SIGKILL)
		watch.Wait()
	}()
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) { // a poll of the file and the terminal
		b, _ := os.ReadFile(path)
		if bytes.Count(b, []byte("\n")) == n && strings.Contains(terminal.String(), want) {
			checkEnvelopes(t, string(b), n)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch did not write %d lines and its bar; the terminal:\n%s", n, terminal)
		}
	}
}

// checkEnvelopes fails unless text is n lines of envelopes, seq 1..n in
// order, each with the data tryPublishBatch gave it.
func checkEnvelopes(t *testing.T, text string, n int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines, want %d", len(lines), n)
	}
	for i, line := range lines {
		var e envelope
		var d struct{ I int }
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Seq != int64(i+1) || json.Unmarshal(e.Data, &d) != nil || d.I != i {
			t.Fatalf("line %d: %q (%v)", i+1, line, err)
		}
	}
}

// lines is a running command's stdout, line by line.
type lines struct {
	ch     chan string
	stderr *lockedBuffer
}

// lockedBuffer is a command's stderr, read while the command writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startCLI runs the binary in the background; the test's cleanup
// interrupts it if it still runs.
func startCLI(t *testing.T, args ...string) (*exec.Cmd, *lines) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	l := &lines{ch: make(chan string, 1024), stderr: &lockedBuffer{}}
	cmd.Stderr = l.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(l.ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l.ch <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, l
}

// next reads the next line, which must come; ok is false once stdout
// has closed.
func (l *lines) next(t *testing.T) (line string, ok bool) {
	t.Helper()
	select {
	case line, ok = <-l.ch:
		return line, ok
	case <-time.After(wait):
		t.Fatalf("no line came; stderr:\n%s", l.stderr)
		panic("unreachable")
	}
}

// seq reads the next line, an envelope, and returns its sequence number.
func (l *lines) seq(t *testing.T) int64 {
	t.Helper()
	line, ok := l.next(t)
	var e envelope
	if !ok || json.Unmarshal([]byte(line), &e) != nil {
		t.Fatalf("want an envelope, got %q (open %v); stderr:\n%s", line, ok, l.stderr)
	}
	return e.Seq
}

// watch --json goes on by itself after the server is killed and started
// again on the same data directory and address: it prints every event
// once, in order, those before the restart and those after.
func TestCLIWatchResumesAfterARestart(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, "--retry", "100ms")
	for i := 1; i <= 3; i++ {
		p.publish(t, "w", fmt.Sprint(i))
	}
	cmd, out := startCLI(t, "watch", "acme/w", "--after", "0", "--json", "--server", p.base)
	for want := int64(1); want <= 3; want++ {
		if got := out.seq(t); got != want {
			t.Fatalf("line %d: seq %d", want, got)
		}
	}
	p.kill9()
	q := startAt(t, binary, nil, dir, strings.TrimPrefix(p.base, "http://"), "--dev", "--retry", "100ms")
	for i := 4; i <= 7; i++ {
		q.publish(t, "w", fmt.Sprint(i))
	}
	for want := int64(4); want <= 7; want++ {
		if got := out.seq(t); got != want {
			t.Fatalf("after the restart: seq %d, want %d; stderr:\n%s", got, want, out.stderr)
		}
	}
	if !strings.Contains(out.stderr.String(), `resuming after "3"`) {
		t.Errorf("no notice of the reconnect on stderr:\n%s", out.stderr)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("an interrupted watch: %v, want exit 0", err)
	}
}

// tenantLine reads the next line, a tenant stream's envelope.
func (l *lines) tenantLine(t *testing.T) tenantEnvelope {
	t.Helper()
	line, ok := l.next(t)
	var e tenantEnvelope
	if !ok || json.Unmarshal([]byte(line), &e) != nil || e.Pos == 0 || e.Topic == "" {
		t.Fatalf("want a tenant envelope, got %q (open %v); stderr:\n%s", line, ok, l.stderr)
	}
	return e
}

// watch TENANT --topic --pattern is one tenant stream: the selected
// topics' events in the tenant's order, each once, also across a kill -9
// of the server, which it resumes from by tenant position.
func TestCLIWatchTenant(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, "--retry", "100ms")
	p.publish(t, "orders", `1`)
	p.publish(t, "other", `2`)
	p.publish(t, "payments.eu", `3`)
	cmd, out := startCLI(t, "watch", "acme", "--topic", "orders", "--pattern", "payments.*", "--after", "0", "--json", "--server", p.base)
	want := []struct {
		topic string
		pos   int64
	}{{"orders", 1}, {"payments.eu", 3}}
	for _, w := range want {
		if e := out.tenantLine(t); e.Topic != w.topic || e.Pos != w.pos || e.Seq != 1 {
			t.Fatalf("got %+v, want %s at %d", e, w.topic, w.pos)
		}
	}
	p.kill9()
	q := startAt(t, binary, nil, dir, strings.TrimPrefix(p.base, "http://"), "--dev", "--retry", "100ms")
	q.publish(t, "other", `4`)
	q.publish(t, "payments.us", `5`)
	q.publish(t, "orders", `6`)
	for _, w := range []struct {
		topic string
		pos   int64
	}{{"payments.us", 5}, {"orders", 6}} {
		if e := out.tenantLine(t); e.Topic != w.topic || e.Pos != w.pos {
			t.Fatalf("after the restart: %+v, want %s at %d; stderr:\n%s", e, w.topic, w.pos, out.stderr)
		}
	}
	if !strings.Contains(out.stderr.String(), `resuming after "3"`) {
		t.Errorf("no notice of the reconnect from tenant position 3 on stderr:\n%s", out.stderr)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("an interrupted watch: %v, want exit 0", err)
	}
	text, _, code := cliRun(t, nil, nil, "", "events", "acme/orders", "--server", q.base)
	if code != 0 || !strings.Contains(text, `"seq":2`) {
		t.Fatalf("events after the watch: exit %d %q", code, text)
	}
}

// completion prints each shell's activation code, and the binary answers
// the shell's requests for completions from its commands and flags.
func TestCLICompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "complete -o default -o bashdefault -C " + binary + " edgehub",
		"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -o default -o bashdefault -C " + binary + " edgehub",
		"fish": "complete -f -c edgehub -a \"(__complete_edgehub)\"",
	} {
		out, errOut, code := cli(t, "", "completion", shell, "-c")
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s -c: exit %d, stdout %q, stderr %q; want %q", shell, code, out, errOut, want)
		}
	}
	for line, want := range map[string][]string{
		"edgehub ten":               {"tenant"},
		"edgehub tenant ":           {"create", "delete", "get", "issuer", "list", "mercure", "rotate", "usage"},
		"edgehub watch acme/x --sn": {"--snapshot"},
	} {
		out, errOut, code := cliRun(t, []string{"COMP_LINE=" + line, "COMP_POINT=" + fmt.Sprint(len(line))}, nil, "")
		got := strings.Fields(out)
		slices.Sort(got)
		if code != 0 || !slices.Equal(got, want) {
			t.Errorf("completing %q: exit %d, %q (stderr %q); want %q", line, code, got, errOut, want)
		}
	}
}

// retryHint is the reconnect hint a watch of p opens with: its --retry.
func retryHint(t *testing.T, p *proc) string {
	t.Helper()
	resp, err := http.Get(p.topicURL("cfg", "watch"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "retry: "); ok {
			return v
		}
	}
	t.Fatalf("no retry line: %v", sc.Err())
	return ""
}

// --config (or EDGEHUB_CONFIG) reads flag values from JSON or YAML; a flag
// beats an EDGEHUB_ variable, which beats the file, which beats the
// default. The client commands read the file too. An unknown key, a file
// that does not parse, a value of the wrong type, an unknown extension or
// a missing file is a usage error naming what is wrong.
func TestCLIConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	jsonFile := write("edgehub.json", `{"retry": "3s", "heartbeat": "20s"}`)
	yamlFile := write("edgehub.yaml", "# serve's flags\nretry: 3s\nmax_body: 2048\n")
	for _, c := range []struct {
		what string
		env  []string
		args []string
		want string
	}{
		{"no file", nil, nil, "2000"},
		{"a JSON file", nil, []string{"--config", jsonFile}, "3000"},
		{"a YAML file from EDGEHUB_CONFIG", []string{"EDGEHUB_CONFIG=" + yamlFile}, nil, "3000"},
		{"EDGEHUB_RETRY=4s and a file of 3s", []string{"EDGEHUB_RETRY=4s"}, []string{"--config", yamlFile}, "4000"},
		{"--retry 5s, EDGEHUB_RETRY=4s and a file of 3s", []string{"EDGEHUB_RETRY=4s"}, []string{"--config", yamlFile, "--retry", "5s"}, "5000"},
	} {
		p := startAt(t, binary, c.env, t.TempDir(), "127.0.0.1:0", append([]string{"--dev"}, c.args...)...)
		if got := retryHint(t, p); got != c.want {
			t.Errorf("%s: retry %s, want %s", c.what, got, c.want)
		}
		p.kill9()
	}

	p := start(t, t.TempDir(), "--config", yamlFile)
	resp, err := http.Post(p.topicURL("x", "notify"), "application/json", strings.NewReader(`"`+strings.Repeat("x", 4096)+`"`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("max_body 2048 from YAML: a 4 KiB body answered %d", resp.StatusCode)
	}
	client := write("client.json", fmt.Sprintf(`{"server": %q}`, p.base))
	if out, errOut, code := cli(t, "", "publish", "acme/x", "1", "--config", client); code != 0 || !strings.Contains(out, `"seq":1`) {
		t.Errorf("publish with the server from a file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	for _, c := range []struct {
		what, file, want string
	}{
		{"an unknown key", write("typo.json", `{"retrry": "3s"}`), `"retrry"`},
		{"a file that does not parse", write("bad.json", `{"retry": `), "bad.json"},
		{"YAML that is no map", write("list.yaml", "- retry\n"), "list.yaml"},
		{"a value of the wrong type", write("type.yaml", "retry: fast\n"), "fast"},
		{"an unknown extension", write("edgehub.toml", `retry = "3s"`), ".json, .yaml or .yml"},
		{"a missing file", filepath.Join(dir, "none.json"), "no such file"},
	} {
		out, errOut, code := cli(t, "", "serve", "--dev", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--config", c.file)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "edgehub: error: ") || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 naming %s", c.what, code, out, errOut, c.want)
		}
	}
}

// serve with neither --dev nor an admin key could never have a tenant: it
// refuses to start (a usage error naming both remedies) and leaves the
// data directory as it was. Any admin key (flag, variable or file) or
// --dev starts it.
func TestServeRefusesToStartHalfConfigured(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	_, stderr, code := cli(t, "", "serve", "--addr", "127.0.0.1:0", "--data", data)
	if code != 2 || !strings.Contains(stderr, "--dev") || !strings.Contains(stderr, "--admin-key") {
		t.Fatalf("serve with neither --dev nor an admin key: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused serve touched its data directory: %v", err)
	}
}

// The admin commands for issuers and revocation, and the topic list,
// against a hub with tenants: an HS issuer registered from a key file,
// listed without its secret, then deleted; the topics a token may read;
// a token revoked by itself (its jti read from it) is refused from then
// on.
func TestCLIIssuersTopicsAndRevocation(t *testing.T) {
	key := "k-" + strings.Repeat("c", 40)
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0")
	admin := []string{"EDGEHUB_ADMIN_KEY=" + key, "EDGEHUB_SERVER=" + p.base}
	run := func(env []string, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := cliRun(t, env, nil, "", args...)
		if code != 0 {
			t.Fatalf("edgehub %v: exit %d, %s", args, code, errOut)
		}
		return out, errOut
	}
	run(admin, "tenant", "create", "acme")
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _ := run(admin, "tenant", "issuer", "add", "acme", "app", "--alg", "HS256", "--key-file", secretFile, "--issuer", "https://app.example"); !strings.Contains(out, `"name":"app"`) || strings.Contains(out, "sss") {
		t.Fatalf("issuer add printed %s", out)
	}
	if out, _ := run(admin, "tenant", "issuer", "list", "acme"); !strings.Contains(out, `"issuer":"https://app.example"`) || strings.Contains(out, "sss") {
		t.Fatalf("issuer list printed %s", out)
	}
	if _, errOut, code := cliRun(t, admin, nil, "", "tenant", "issuer", "add", "acme", "half", "--alg", "HS256"); code != 2 || !strings.Contains(errOut, "--alg and --key-file go together") {
		t.Fatalf("issuer add with --alg alone: exit %d, %q", code, errOut)
	}
	run(admin, "tenant", "issuer", "delete", "acme", "app")
	if out, _ := run(admin, "tenant", "issuer", "list", "acme"); strings.Contains(out, "app") {
		t.Fatalf("after the delete, issuer list printed %s", out)
	}

	tok, _ := run(admin, "token", "acme", "--publish", "*", "--subscribe", "orders*")
	tok = strings.TrimSpace(tok)
	user := []string{"EDGEHUB_TOKEN=" + tok, "EDGEHUB_SERVER=" + p.base}
	for _, topic := range []string{"orders-1", "orders-2", "refunds"} {
		run(user, "publish", "acme/"+topic, `{"n":1}`)
	}
	out, _ := run(user, "topics", "acme", "--all")
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var tp struct {
			Topic string
			Head  int64
		}
		if err := json.Unmarshal([]byte(line), &tp); err != nil || tp.Head != 1 {
			t.Fatalf("topics printed %q", line)
		}
		names = append(names, tp.Topic)
	}
	if strings.Join(names, " ") != "orders-1 orders-2" {
		t.Fatalf("topics the token may read: %v, want orders-1 orders-2", names)
	}
	run(admin, "token", "revoke", "acme", tok)
	if _, errOut, code := cliRun(t, user, nil, "", "publish", "acme/orders-1", `{"n":2}`); code != 1 || !strings.Contains(errOut, "401") {
		t.Fatalf("publish with the revoked token: exit %d, %q", code, errOut)
	}
}

// A 401 says which check of the credential failed, as far as the command
// can tell (none given, not a JWT, expired, or not accepted), and says
// the same for a tenant that does not exist as for one whose secret the
// token does not match.
func TestCLISaysWhichCredentialCheckFailed(t *testing.T) {
	key := "k-" + strings.Repeat("d", 40)
	p := startAt(t, binary, []string{"EDGEHUB_ADMIN_KEY=" + key}, t.TempDir(), "127.0.0.1:0")
	if st, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", key, ""); st != 201 {
		t.Fatalf("create tenant: %d %s", st, b)
	}
	sign := func(exp time.Time) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"tenant": "acme", "publish": []string{"*"}, "exp": exp.Unix()}).
			SignedString([]byte("not the tenant's secret"))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	notAccepted := "the token is a JWT and unexpired, and the server does not accept it"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"publish", "acme/x", "{}"}, "no token was given"},
		{[]string{"publish", "acme/x", "{}", "--token", "garbage"}, "the token is not a JWT"},
		{[]string{"publish", "acme/x", "{}", "--token", sign(time.Now().Add(-time.Hour))}, "the token expired at "},
		{[]string{"publish", "acme/x", "{}", "--token", sign(time.Now().Add(time.Hour))}, notAccepted},
		{[]string{"publish", "ghost/x", "{}", "--token", sign(time.Now().Add(time.Hour))}, notAccepted},
		{[]string{"tenant", "get", "acme"}, "no admin key was given"},
		{[]string{"tenant", "get", "acme", "--admin-key", "wrong"}, "the admin key is not the server's"},
	} {
		_, errOut, code := cliRun(t, []string{"EDGEHUB_ADMIN_KEY=", "EDGEHUB_TOKEN="}, nil, "", append(c.args, "--server", p.base)...)
		if code != 1 || !strings.Contains(errOut, "401 unauthorized") || !strings.Contains(errOut, c.want) {
			t.Errorf("edgehub %v: exit %d, %q; want 401 saying %q", c.args[:2], code, errOut, c.want)
		}
	}
}
