// Command edgeload measures Edgehub over real HTTP on loopback.
//
//	edgeload bench [flags]
//
// starts the hubs it compares (Edgehub, a peer hub binary the user points
// it at, and cmd/edgeceiling, the bare writer that is the machine's
// ceiling), runs each scenario at the chosen scale in interleaved rounds,
// checks every delivery while it measures, and prints a table of min,
// median and max over the rounds (and JSON lines, and an SVG chart, when
// asked). See plans/017-benchmark.md.
//
//	edgeload [--server URL] [--only LIST] ...
//
// measures one Edgehub that is already running, including the scenarios
// that need a server started with matching flags (state, retention).
package main

import "os"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "bench" {
		os.Exit(benchMain(os.Args[2:]))
	}
	legacyMain()
}
