//go:build !faults

// Package faults says which bug a binary built with -tags faults injects,
// for the chaos checker's own tests; only files built with that tag ask
// it. In a normal build no fault is ever on.
package faults

// On reports whether the named fault is injected: never, in this build.
func On(string) bool { return false }
