//go:build faults

// Package faults injects the bugs that the chaos checker must catch. It is
// only compiled into binaries built with -tags faults, for the checker's
// own tests; EDGEHUB_FAULT names the one fault to inject.
package faults

import "os"

var active = os.Getenv("EDGEHUB_FAULT")

// On reports whether the named fault is injected.
func On(name string) bool { return active == name }
