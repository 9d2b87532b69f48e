package backlog

import (
	"os"
	"syscall"
)

// syncData flushes f's data and only the metadata needed to read it back:
// once the WAL has reached its size and SQLite overwrites it from the
// start after each checkpoint, no metadata is written, and the flush is
// half the cost of an fsync on this kind of disk (plan 018).
func syncData(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
