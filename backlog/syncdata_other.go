//go:build !linux

package backlog

import "os"

// syncData is fsync where fdatasync is not to be had.
func syncData(f *os.File) error { return f.Sync() }
