// Command edgehub runs the hub (serve) and talks to one: publish, watch,
// read events and state, manage tenants and tokens. It parses flags,
// wires the parts and handles signals; the talking is package client's.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/alecthomas/kong"
	kongcompletion "github.com/jotaen/kong-completion"
)

type cli struct {
	Config configFile `name:"config" env:"EDGEHUB_CONFIG" placeholder:"FILE" help:"JSON (.json) or YAML (.yaml, .yml) file of flag values by flag name (max_body: 2097152); a flag or an EDGEHUB_ variable wins over it."`

	Serve      serveCmd                  `cmd:"" help:"Run the hub."`
	Publish    publishCmd                `cmd:"" help:"Publish an event (or an NDJSON batch from stdin) and print the answer."`
	Watch      watchCmd                  `cmd:"" help:"Watch a topic and print its events as they come."`
	Events     eventsCmd                 `cmd:"" help:"Print a topic's events as NDJSON, one page or (--all) up to the head."`
	State      stateCmd                  `cmd:"" help:"Print a topic's state."`
	Topics     topicsCmd                 `cmd:"" help:"Print a tenant's topics (those the token may read) as NDJSON."`
	Tenant     tenantCmd                 `cmd:"" help:"Create, show, rotate or delete a tenant, or manage its token issuers (admin API)."`
	Token      tokenCmd                  `cmd:"" help:"Mint a token of a tenant and print it, or revoke one (admin API)."`
	Health     healthCmd                 `cmd:"" help:"Exit 0 when the hub is ready (/readyz answers 200), else 1 with the reason: a container's health check."`
	Completion kongcompletion.Completion `cmd:"" help:"Print how to turn on tab completion in bash, zsh or fish (-c: the code itself)."`
	Version    versionCmd                `cmd:"" help:"Print the version of this binary and what it was built from."`
}

// Exit codes, as --help documents them.
const (
	exitFailed = 1 // the server refused, could not be reached, or serve failed
	exitUsage  = 2 // the command line is wrong
)

const description = `Edgehub: a durable SSE streaming hub.

Exit codes: 0 success; 1 the server refused the request or could not be
reached, or serve failed; 2 the command line (or its --config file) is
wrong.`

func main() {
	var c cli
	k, err := kong.New(&c, kong.Name("edgehub"), kong.Description(description))
	if err != nil {
		panic(fmt.Sprintf("the command line's tags: %v", err))
	}
	kongcompletion.Register(k) // answers the shell's completion requests, and exits
	kctx, err := k.Parse(os.Args[1:])
	if err != nil {
		os.Exit(usageError(os.Stderr, err))
	}
	if err := kctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "edgehub:", err)
		os.Exit(exitFailed)
	}
}

// usageError tells what is wrong with the command line, first and alone,
// then where the help is, rather than the whole help with the one line
// that matters at its end.
func usageError(w io.Writer, err error) int {
	help := "edgehub --help"
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		if cmd := pe.Context.Selected(); cmd != nil {
			help = cmd.FullPath() + " --help"
		}
	}
	fmt.Fprintf(w, "edgehub: error: %v\nrun %q for usage\n", err, help) //nolint:errcheck // stderr: nowhere to tell of a failed write
	return exitUsage
}

type versionCmd struct{}

// Run prints what the Go toolchain recorded in the binary: the module's
// version (a tagged release, or "(devel)" from a clone), the commit and
// whether the tree had changes, and the Go version.
func (versionCmd) Run() error {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("this binary carries no build information")
	}
	line := "edgehub " + info.Main.Version
	var rev, when, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		line += " commit " + rev
		if modified == "true" {
			line += " (with changes)"
		}
	}
	if when != "" {
		line += " of " + when
	}
	fmt.Println(line + " " + info.GoVersion)
	return nil
}
