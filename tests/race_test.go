//go:build race

package tests

// raceFlags builds the server under test with the race detector when the
// tests themselves run with it, so `go test -race` covers the binary too.
var raceFlags = []string{"-race"}
