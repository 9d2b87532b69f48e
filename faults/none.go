//go:build !faults

// Package faults injects the bugs that the chaos checker must catch. In a
// normal build no fault is ever on, and the compiler drops the faulty
// branches; binaries built with -tags faults read EDGEHUB_FAULT.
package faults

// On reports whether the named fault is injected: never, in this build.
func On(string) bool { return false }
