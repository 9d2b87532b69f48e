package tests

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// imageUser is the user the Dockerfile runs the hub as.
const imageUser = 65532

// dockerfile returns the Dockerfile's instructions, one a line, with
// comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// No Docker engine runs here, so the test does what the image does: it
// runs the Dockerfile's own build command, checks that the binary needs
// no shared library, and starts it in a root holding nothing but what the
// image copies in, as the image's user, with the image's environment. The
// hub must serve there and keep its backlog in the volume.
func TestTheImagesBinaryServesInAnEmptyRootAsItsUser(t *testing.T) {
	lines := dockerfile(t)
	var build string
	env := []string{}
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "RUN CGO_ENABLED=0 go build"):
			build = strings.TrimPrefix(l, "RUN ")
		case strings.HasPrefix(l, "ENV "):
			env = append(env, strings.Fields(strings.TrimPrefix(l, "ENV "))...)
		}
	}
	for _, want := range []string{"FROM scratch", fmt.Sprintf("USER %d:%d", imageUser, imageUser), "VOLUME /data", `ENTRYPOINT ["/edgehub"]`} {
		if !containsLine(lines, want) {
			t.Fatalf("the Dockerfile lacks %q", want)
		}
	}
	if build == "" {
		t.Fatal("the Dockerfile has no RUN CGO_ENABLED=0 go build line")
	}
	root := t.TempDir()
	out := filepath.Join(root, "edgehub")
	cmd := exec.Command("sh", "-c", strings.Replace(build, "-o /out/edgehub", "-o "+out, 1))
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build: %v\n%s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary is dynamically linked: it would not start on an empty base image")
		}
	}
	f.Close()

	if os.Geteuid() != 0 {
		t.Skip("starting the binary in an empty root as another user needs root (CI runs as root)")
	}
	for dir, mode := range map[string]os.FileMode{"data": 0o755, "tmp": 0o1777} {
		if err := os.Mkdir(filepath.Join(root, dir), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(root, dir), mode)
	}
	if err := os.Chown(filepath.Join(root, "data"), imageUser, imageUser); err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o755) // t.TempDir is 0700: the image's user must reach /edgehub
	srv := exec.Command("/edgehub", "serve", "--addr", "127.0.0.1:0")
	srv.Env = append(env, "EDGEHUB_ADMIN_KEY=k-image")
	srv.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: imageUser, Gid: imageUser}}
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	addr := make(chan string, 1)
	var logged bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logged.WriteString(sc.Text() + "\n")
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1] + m[2]
			}
		}
		close(addr)
	}()
	var base string
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("the hub exited in the empty root: %v\n%s", srv.Wait(), logged.String())
		}
		base = "http://" + a
	case <-time.After(wait):
		t.Fatal("the hub did not listen")
	}
	if st, _, b := do(t, "PUT", base+"/v1/admin/tenants/acme", "k-image", ""); st != 201 {
		t.Fatalf("create a tenant: %d %s", st, b)
	}
	_, _, b := do(t, "POST", base+"/v1/admin/tenants/acme/tokens", "k-image", `{"publish":["*"],"ttl":"1m"}`)
	var tok struct{ Token string }
	json.Unmarshal(b, &tok)
	if st, _, b := do(t, "POST", base+"/v1/tenants/acme/topics/orders/notify", tok.Token, `{"n":1}`); st != 201 {
		t.Fatalf("publish: %d %s", st, b)
	}
	// The image's health check, run as the image runs it, answers for
	// this hub.
	if !containsLine(lines, `HEALTHCHECK --interval=10s --timeout=6s --start-period=10s CMD ["/edgehub", "health"]`) {
		t.Fatal("the Dockerfile's HEALTHCHECK is not edgehub health")
	}
	check := exec.Command("/edgehub", "health", "--server", base)
	check.Env = env
	check.SysProcAttr = srv.SysProcAttr
	if b, err := check.CombinedOutput(); err != nil {
		t.Fatalf("the health check in the empty root: %v %s", err, b)
	}
	entries, err := os.ReadDir(filepath.Join(root, "data"))
	if err != nil || len(entries) == 0 {
		t.Fatalf("nothing in the volume: %v", err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); st.Uid != imageUser {
			t.Fatalf("%s in the volume belongs to uid %d, not the image's user", e.Name(), st.Uid)
		}
	}
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// The unit file must be one systemd accepts, with the binary where it
// says; and the admin key must come as a credential, never on the command
// line, where every local user can read it.
func TestTheSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	unit, err := os.ReadFile("../packaging/edgehub.service")
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`--admin-key[ =]`).Match(unit) {
		t.Fatal("the unit passes the admin key on the command line")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "edgehub")
	if err := os.Symlink(binary, bin); err != nil {
		t.Fatal(err)
	}
	local := bytes.ReplaceAll(unit, []byte("/usr/local/bin/edgehub"), []byte(bin))
	path := filepath.Join(dir, "edgehub.service")
	if err := os.WriteFile(path, local, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// `go install` from a clone is how the README installs the command line.
func TestGoInstallFromAClone(t *testing.T) {
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", "./cmd/edgehub")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOBIN="+gobin)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, b)
	}
	out, err := exec.Command(filepath.Join(gobin, "edgehub"), "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "edgehub ") {
		t.Fatalf("the installed binary's version: %q %v", out, err)
	}
}

// The systemd unit's Documentation= names a page that install.md's steps
// put where it says.
func TestTheUnitsDocumentationIsWhereTheInstallPutsIt(t *testing.T) {
	unit, err := os.ReadFile("../packaging/edgehub.service")
	if err != nil {
		t.Fatal(err)
	}
	install, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Documentation=file://(/\S+)/([^/\s]+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("the unit has no Documentation=file:// line")
	}
	dir, page := string(m[1]), string(m[2])
	if !strings.Contains(string(install), "install -m 0644 docs/*.md "+dir+"/") {
		t.Errorf("install.md does not copy docs/*.md to %s, where the unit's Documentation= looks", dir)
	}
	if _, err := os.Stat(filepath.Join("../docs", page)); err != nil {
		t.Errorf("the unit's Documentation= names %s, which docs/ lacks: %v", page, err)
	}
}
