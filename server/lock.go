package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDir takes the data directory for this process: an exclusive flock on
// dir/edgehub.lock, which the kernel drops when the process dies, kill -9
// included. Two servers on one SQLite file would each number events in
// its own hub and learn of the other's commits only from the periodic head
// check, so the second one must not start. The file holds the pid of the
// server that holds it, and Shutdown empties it (unlockDir): a pid found
// there, returned as unclean, is that of a server that did not stop
// cleanly.
func lockDir(dir string) (f *os.File, unclean string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("create data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, "edgehub.lock")
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("open lock of data directory %s: %w", dir, err)
	}
	// Like every file of the directory, the owner's alone, whatever made it.
	if err := f.Chmod(0o600); err != nil {
		return nil, "", errors.Join(fmt.Errorf("make the lock of data directory %s its owner's alone: %w", dir, err), f.Close())
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		cerr := f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, "", errors.Join(fmt.Errorf("data directory %s is in use by another edgehub serve (it holds %s); one server per data directory", dir, path), cerr)
		}
		return nil, "", errors.Join(fmt.Errorf("lock data directory %s: %w", dir, err), cerr)
	}
	var last [32]byte
	n, _ := f.ReadAt(last[:], 0) // a short read is the whole pid; a failed one says nothing
	unclean = strings.TrimSpace(string(last[:n]))
	// The pid is for operators and for the next start; the lock is the
	// flock, not the content.
	leavePid(f, strconv.Itoa(os.Getpid())) //nolint:errcheck // informational only
	return f, unclean, nil
}

// unlockDir leaves pid in the lock and lets it go: "" once the backlog
// was closed cleanly, or the pid that lockDir found, for a start that
// failed before it opened the backlog. A nil lock (on Postgres) is none.
func unlockDir(lock *os.File, pid string) error {
	if lock == nil {
		return nil
	}
	return errors.Join(leavePid(lock, pid), lock.Close())
}

// leavePid makes pid, or nothing if it is "", the lock's content.
func leavePid(lock *os.File, pid string) error {
	if err := lock.Truncate(0); err != nil || pid == "" {
		return err
	}
	_, err := lock.WriteAt([]byte(pid+"\n"), 0)
	return err
}
