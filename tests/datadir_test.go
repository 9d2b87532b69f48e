package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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

// dataFiles are the files of a data directory that hold its tenants'
// secrets, or say who holds it.
var dataFiles = []string{"edgehub.db", "edgehub.db-wal", "edgehub.db-shm", "edgehub.lock"}

// modesOf fails unless each of dataFiles is in dir with mode 0600, and
// says of which run.
func modesOf(t *testing.T, dir, when string) {
	t.Helper()
	for _, f := range dataFiles {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if m := info.Mode().Perm(); m != 0o600 {
			t.Errorf("%s: %s has mode %04o, want 0600", when, f, m)
		}
	}
}

// The database and its -wal and -shm, which hold every tenant's secrets,
// are their owner's alone (0600), as the lock is: in a data directory
// that another user may read (an existing 0755 one), and when an older
// version left them 0644. A directory the server creates is 0700.
func TestDataDirFilesAreTheOwnersAlone(t *testing.T) {
	if pgtest.Enabled() {
		t.Skip("a data directory is SQLite's")
	}
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	p := start(t, dir)
	p.publish(t, "x", `1`) // the WAL and its index exist while the server runs
	modesOf(t, dir, "a new database in an existing 0755 directory")

	p.kill9() // leaves the -wal and -shm, as a crash does
	for _, f := range dataFiles {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p = start(t, dir)
	p.publish(t, "x", `2`)
	modesOf(t, dir, "files an older version left 0644")

	fresh := filepath.Join(t.TempDir(), "new", "data")
	start(t, fresh).publish(t, "x", `1`)
	for _, d := range []string{fresh, filepath.Dir(fresh)} {
		if info, err := os.Stat(d); err != nil || info.Mode().Perm() != 0o700 {
			t.Errorf("a directory the server created: %v %v, want 0700", info.Mode(), err)
		}
	}
	modesOf(t, fresh, "a new data directory")
}

// A file that holds the admin key (--admin-key-file, or a --config file
// with admin_key) and that its group or others may read is warned about
// once, at start; one that is its owner's alone, or a config file without
// the key, is not.
func TestSecretFilesReadableByOthersAreWarnedAbout(t *testing.T) {
	const key = "admin-key-of-the-secret-file-test-0123456789"
	const keyWarning = "the admin key file is readable by other users"
	const configWarning = "the config file holds admin_key and is readable by other users"
	write := func(name, text string, mode os.FileMode) string {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		what string
		args []string
		want string // the warning, or "" for none
	}{
		{"a key file of 0644", []string{"--admin-key-file", write("admin-key", key+"\n", 0o644)}, keyWarning},
		{"a key file of 0640", []string{"--admin-key-file", write("admin-key", key+"\n", 0o640)}, keyWarning},
		{"a key file of 0600", []string{"--admin-key-file", write("admin-key", key+"\n", 0o600)}, ""},
		{"a config file of 0644 with admin_key", []string{"--config", write("edgehub.yaml", "admin_key: "+key+"\n", 0o644)}, configWarning},
		{"a config file of 0644 with adminKey", []string{"--config", write("edgehub.json", `{"adminKey": "`+key+`"}`, 0o644)}, configWarning},
		{"a config file of 0600 with admin_key", []string{"--config", write("edgehub.yaml", "admin_key: "+key+"\n", 0o600)}, ""},
		{"a config file of 0644 without admin_key", []string{"--admin-key-file", write("admin-key", key+"\n", 0o600), "--config", write("edgehub.yaml", "retry: 3s\n", 0o644)}, ""},
	} {
		p := startAt(t, binary, nil, t.TempDir(), "127.0.0.1:0", c.args...)
		if status, _, b := do(t, "PUT", p.base+"/v1/admin/tenants/acme", key, ""); status != 201 {
			t.Fatalf("%s: the key does not work: %d %s", c.what, status, b)
		}
		log := p.logText() // the warnings come before the listening line
		warned := 0
		for _, w := range []string{keyWarning, configWarning} {
			warned += strings.Count(log, w)
		}
		switch {
		case c.want == "" && warned > 0:
			t.Errorf("%s: warned:\n%s", c.what, log)
		case c.want != "" && (warned != 1 || !strings.Contains(log, c.want)):
			t.Errorf("%s: want one warning %q:\n%s", c.what, c.want, log)
		}
		p.kill9()
	}
}
