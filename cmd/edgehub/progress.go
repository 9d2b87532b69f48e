package main

import (
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress is a bar on stderr for a replay written to a file: from the
// position it starts after to the head. A nil *progress shows nothing, so
// callers need not ask whether there is one.
type progress struct {
	bar  *progressbar.ProgressBar
	from int64
}

// newProgress shows a bar from from to head when stdout is a regular
// file, the long replay it is for, and stderr a terminal, someone to see
// it; at a terminal or into a pipe the output itself shows how far it
// got, and a bar would only mix with it, and a log or a pipe on stderr
// would get its redraws.
func newProgress(from, head int64, what string) *progress {
	fi, err := os.Stdout.Stat()
	if err != nil || !fi.Mode().IsRegular() || head <= from || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return &progress{from: from, bar: progressbar.NewOptions64(head-from,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("events"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }),
	)}
}

// grow moves the bar's end to a head that moved on.
func (p *progress) grow(head int64) {
	if p != nil && head-p.from > p.bar.GetMax64() {
		p.bar.ChangeMax64(head - p.from)
	}
}

// at moves the bar to seq and reports whether that was its end (then the
// bar is done).
func (p *progress) at(seq int64) bool {
	if p == nil {
		return false
	}
	p.bar.Set64(min(seq-p.from, p.bar.GetMax64())) //nolint:errcheck // stderr: nowhere to tell of a failed write
	return p.bar.IsFinished()
}

// done leaves the bar where it is, on a line of its own, when the replay
// ends before the head.
func (p *progress) done() {
	if p != nil && !p.bar.IsFinished() {
		p.bar.Exit() //nolint:errcheck // stderr: nowhere to tell of a failed write
	}
}
