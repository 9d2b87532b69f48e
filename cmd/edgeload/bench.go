package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sizes are the scale of each scenario.
type sizes struct {
	publish1, publish16 int // events
	topics16            int // events over spreadTopics topics from 16 publishers
	tenants16           int // events from 16 publishers, each on a tenant of its own
	batches             int // NDJSON batches of batchSize events
	fanout              []fanoutSize
	fanoutFor           time.Duration
	idle                int           // streams
	settle              time.Duration // idle: how long the streams sit before the server's memory is read
	catchup             int           // events
	topics              int
	dsAppend1           int // ds-append: messages from 1 appender
	dsAppend16          int // and from 16
	dsReaders, dsRate   int // ds-sse: SSE readers, appends a second
	dsFor               time.Duration
}

type fanoutSize struct{ watchers, rate int }

const batchSize = 1000

// scales are the presets of --scale; flags override each size.
var scales = map[string]sizes{
	"tiny": {publish1: 100, publish16: 400, topics16: 400, tenants16: 400, batches: 2,
		fanout: []fanoutSize{{50, 50}}, fanoutFor: time.Second,
		idle: 100, settle: 200 * time.Millisecond, catchup: 1000, topics: 200,
		dsAppend1: 100, dsAppend16: 400, dsReaders: 10, dsRate: 50, dsFor: time.Second},
	"medium": {publish1: 1000, publish16: 5000, topics16: 5000, tenants16: 5000, batches: 10,
		fanout: []fanoutSize{{1000, 100}, {5000, 20}}, fanoutFor: 3 * time.Second,
		idle: 3000, settle: 2 * time.Second, catchup: 20000, topics: 5000,
		dsAppend1: 1000, dsAppend16: 5000, dsReaders: 100, dsRate: 100, dsFor: 5 * time.Second},
	"full": {publish1: 5000, publish16: 50000, topics16: 50000, tenants16: 50000, batches: 100,
		fanout: []fanoutSize{{1000, 100}, {5000, 20}}, fanoutFor: 10 * time.Second,
		idle: 10000, settle: 2 * time.Second, catchup: 100000, topics: 100000,
		dsAppend1: 5000, dsAppend16: 50000, dsReaders: 1000, dsRate: 100, dsFor: 10 * time.Second},
}

// The ds-* scenarios are Durable Streams (/v1/stream/{name}); they run on
// the targets that speak it (edgehub, ds-reference); the mercure-* ones,
// the Mercure protocol's subscriptions of several selectors, on mercure
// and edgehub-mercure. Neither is in the default --scenarios.
var (
	allScenarios     = append(slices.Clone(defaultScenarios), "ds-append", "ds-sse", "mercure-fanout", "mercure-resume")
	defaultScenarios = []string{"publish1", "publish16", "topics16", "tenants16", "batch", "fanout", "idle", "catchup",
		"topics", "tenant-idle"}
)

// benchCase is one scenario at one size: each target runs it once a round.
type benchCase struct {
	scenario string
	title    string
	params   map[string]any
	metrics  []string // in the table's order
	run      func(ctx context.Context, t Target) (*result, error)
}

// measurement is one JSON line: one case, on one target, in one round.
type measurement struct {
	Target     string             `json:"target"`
	Round      int                `json:"round"`
	Scenario   string             `json:"scenario"`
	Case       string             `json:"case"`
	Params     map[string]any     `json:"params"`
	Metrics    map[string]float64 `json:"metrics"`
	Violations violations         `json:"violations,omitempty"`
	Error      string             `json:"error,omitempty"`
	Seconds    float64            `json:"seconds"`
}

func benchMain(args []string) int {
	fs := flag.NewFlagSet("edgeload bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: edgeload bench [flags]\n\n"+
			"Starts each target on loopback, runs each scenario in interleaved rounds, checks every\n"+
			"delivery, and prints min / median / max over the rounds. Exits 1 if Edgehub breaks a\n"+
			"delivery rule or fails. Scenarios: %s.\n\n", strings.Join(allScenarios, ", "))
		fs.PrintDefaults()
	}
	bin := fs.String("bin", "", "edgehub binary (default: go build ./cmd/edgehub)")
	baseBin := fs.String("base", "", "an earlier edgehub binary; adds the edgehub-base target beside edgehub, so that a change is measured before and after in one run")
	ceilingBin := fs.String("ceiling", "", "edgeceiling binary (default: go build ./cmd/edgeceiling)")
	centrifugoBin := fs.String("centrifugo", "", "a Centrifugo v6 binary; adds the centrifugo target")
	mercureBin := fs.String("mercure", "", "a Mercure hub binary (caddy/mercure in its repository); adds the mercure target, on its bolt transport")
	targetList := fs.String("targets", "", "targets, in their order within a round (default: edgehub, edgehub-base if --base, centrifugo if --centrifugo, edgehub-mercure and mercure if --mercure, ceiling)")
	scenarioList := fs.String("scenarios", strings.Join(defaultScenarios, ","), "scenarios to run (the Durable Streams ones, ds-append and ds-sse, only when named)")
	scale := fs.String("scale", "full", "tiny, medium or full: the sizes below when they are not given")
	rounds := fs.Int("rounds", 3, "rounds; each runs every target once per case, in order")
	fanoutList := fs.String("fanout", "", "fan-out cases, WATCHERSxRATE (events/s), comma-separated (full: 1000x100,5000x20)")
	watchersList := fs.String("watchers-list", "", "fan-out watcher counts, all at --rate, comma-separated; replaces --fanout")
	rate := fs.Int("rate", 20, "events per second of --watchers-list")
	fanoutFor := fs.Duration("fanout-for", 0, "how long each fan-out case publishes (full: 10s)")
	publish1 := fs.Int("publish1", 0, "events of publish1 (full: 5000)")
	publish16 := fs.Int("publish16", 0, "events of publish16 (full: 50000)")
	topics16 := fs.Int("topics16", 0, "events of topics16, over 1000 topics (full: 50000)")
	tenants16 := fs.Int("tenants16", 0, "events of tenants16, over 16 tenants (full: 50000)")
	batchCount := fs.Int("batches", 0, "batches of 1000 events in batch (full: 100)")
	idleN := fs.Int("idle", 0, "idle streams (full: 10000; capped by the open-files limit)")
	catchupN := fs.Int("catchup", 0, "events to catch up on (full: 100000)")
	topicsN := fs.Int("topics", 0, "topics touched once in topics (full: 100000)")
	jsonOut := fs.String("json", "", "write JSON lines here (- for standard output, which moves the table to standard error)")
	svgOut := fs.String("svg", "", "draw fan-out p50 and p99 latency against watcher count into this SVG file")
	edgehubArgs := fs.String("edgehub-args", "", "more flags for edgehub serve, space-separated")
	dsReferenceDir := fs.String("ds-reference", "", "a directory whose node_modules holds @durable-streams/server; adds the ds-reference target")
	dsReferenceMemory := fs.Bool("ds-reference-memory", false, "run ds-reference in memory instead of file-backed")
	nodeBin := fs.String("node", "node", "the node binary for ds-reference")
	dsAppend1 := fs.Int("ds-append1", 0, "messages of ds-append from one appender (full: 5000)")
	dsAppend16 := fs.Int("ds-append16", 0, "messages of ds-append from 16 concurrent appenders (full: 50000)")
	dsReaders := fs.Int("ds-readers", 0, "SSE readers of ds-sse (full: 1000)")
	dsRate := fs.Int("ds-rate", 0, "appends a second of ds-sse (full: 100)")
	dsFor := fs.Duration("ds-for", 0, "how long ds-sse appends (full: 10s)")
	postgres := fs.String("postgres", "", "a PostgreSQL cluster's URL for the edgehub-pgN targets (N processes sharing a fresh database on it)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "edgeload bench:", err)
		return 2
	}
	sz, ok := scales[*scale]
	if !ok {
		return fail(fmt.Errorf("unknown --scale %q", *scale))
	}
	for _, o := range []struct {
		flag int
		size *int
	}{{*publish1, &sz.publish1}, {*publish16, &sz.publish16}, {*topics16, &sz.topics16}, {*tenants16, &sz.tenants16},
		{*batchCount, &sz.batches}, {*idleN, &sz.idle},
		{*catchupN, &sz.catchup}, {*topicsN, &sz.topics}, {*dsAppend1, &sz.dsAppend1}, {*dsAppend16, &sz.dsAppend16},
		{*dsReaders, &sz.dsReaders}, {*dsRate, &sz.dsRate}} {
		if o.flag > 0 {
			*o.size = o.flag
		}
	}
	if *fanoutFor > 0 {
		sz.fanoutFor = *fanoutFor
	}
	if *dsFor > 0 {
		sz.dsFor = *dsFor
	}
	var err error
	switch {
	case *watchersList != "":
		sz.fanout = nil
		for _, w := range strings.Split(*watchersList, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil || n < 1 || *rate < 1 {
				return fail(fmt.Errorf("bad --watchers-list %q or --rate %d", *watchersList, *rate))
			}
			sz.fanout = append(sz.fanout, fanoutSize{n, *rate})
		}
	case *fanoutList != "":
		if sz.fanout, err = parseFanout(*fanoutList); err != nil {
			return fail(err)
		}
	}
	scenarios := strings.Split(*scenarioList, ",")
	for _, s := range scenarios {
		if !slices.Contains(allScenarios, s) {
			return fail(fmt.Errorf("unknown scenario %q", s))
		}
	}
	if *rounds < 1 {
		return fail(errors.New("--rounds must be at least 1"))
	}
	limit := raiseOpenFiles()
	if capN := int(limit) - 500; sz.idle > capN && (slices.Contains(scenarios, "idle") || slices.Contains(scenarios, "tenant-idle")) {
		fmt.Fprintf(os.Stderr, "edgeload bench: idle capped at %d streams: the open-files limit is %d per process (ulimit -n), and the server holds one per stream\n", capN, limit)
		sz.idle = capN
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tmp, err := os.MkdirTemp("", "edgeload-bench")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp) //nolint:errcheck // a temporary directory
	names := []string{"edgehub"}
	if *baseBin != "" {
		names = append(names, "edgehub-base")
	}
	if *centrifugoBin != "" {
		names = append(names, "centrifugo")
	}
	if *mercureBin != "" {
		names = append(names, "edgehub-mercure", "mercure")
	}
	// ds-reference runs only the Durable Streams scenarios, the ceiling
	// none of them: the default list leaves out a target with nothing to run.
	if *dsReferenceDir != "" && slices.ContainsFunc(scenarios, isDSScenario) {
		names = append(names, "ds-reference")
	}
	if slices.ContainsFunc(scenarios, func(s string) bool { return !isDSScenario(s) }) {
		names = append(names, "ceiling")
	}
	if *targetList != "" {
		names = strings.Split(*targetList, ",")
	}
	var targets []Target
	for _, name := range names {
		var t Target
		switch name {
		case "edgehub", "edgehub-pg1", "edgehub-pg2", "edgehub-pg3":
			if *bin == "" {
				if *bin, err = build(tmp, "edgehub"); err != nil {
					return fail(err)
				}
			}
			e := &edgehub{name: name, bin: *bin, args: strings.Fields(*edgehubArgs)}
			if name != "edgehub" {
				if *postgres == "" {
					return fail(fmt.Errorf("the %s target needs --postgres URL", name))
				}
				e.cluster, e.procs = *postgres, int(name[len(name)-1]-'0')
			}
			t = e
		case "edgehub-base":
			if *baseBin == "" {
				return fail(errors.New("the edgehub-base target needs --base PATH"))
			}
			t = &edgehub{name: name, bin: *baseBin, args: strings.Fields(*edgehubArgs)}
		case "edgehub-mercure":
			if *bin == "" {
				if *bin, err = build(tmp, "edgehub"); err != nil {
					return fail(err)
				}
			}
			t = newEdgehubMercure(*bin, strings.Fields(*edgehubArgs))
		case "ceiling":
			if *ceilingBin == "" {
				if *ceilingBin, err = build(tmp, "edgeceiling"); err != nil {
					return fail(err)
				}
			}
			t = &ceiling{bin: *ceilingBin}
		case "centrifugo":
			if *centrifugoBin == "" {
				if *centrifugoBin, err = exec.LookPath("centrifugo"); err != nil {
					return fail(errors.New("the centrifugo target needs --centrifugo PATH"))
				}
			}
			t = &centrifugo{bin: *centrifugoBin}
		case "mercure":
			if *mercureBin == "" {
				if *mercureBin, err = exec.LookPath("mercure"); err != nil {
					return fail(errors.New("the mercure target needs --mercure PATH"))
				}
			}
			t = &mercure{bin: *mercureBin}
		case "ds-reference":
			if *dsReferenceDir == "" {
				return fail(errors.New("the ds-reference target needs --ds-reference DIR"))
			}
			dir, err := filepath.Abs(*dsReferenceDir)
			if err != nil {
				return fail(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "node_modules", "@durable-streams", "server", "package.json")); err != nil {
				return fail(fmt.Errorf("--ds-reference %s: no node_modules/@durable-streams/server there", dir))
			}
			t = &dsReference{node: *nodeBin, dir: dir, memory: *dsReferenceMemory}
		default:
			return fail(fmt.Errorf("unknown target %q (edgehub, edgehub-base, edgehub-pg1..3, edgehub-mercure, centrifugo, mercure, ds-reference, ceiling)", name))
		}
		targets = append(targets, t)
	}

	out, jsonW := io.Writer(os.Stdout), io.Writer(nil)
	switch *jsonOut {
	case "":
	case "-":
		out, jsonW = os.Stderr, os.Stdout
	default:
		f, err := os.Create(*jsonOut)
		if err != nil {
			return fail(err)
		}
		defer f.Close() //nolint:errcheck // written line by line; a failed write is reported there
		jsonW = f
	}
	b := &bench{targets: targets, rounds: *rounds, tmp: tmp, out: out, json: jsonW}
	cases := b.cases(scenarios, sz)
	b.printf("edgeload bench: %s, %d rounds, targets %s; %d cores\n", *scale, *rounds,
		strings.Join(names, ", "), runtime.NumCPU())
	for _, t := range targets {
		if d, ok := t.(*dsReference); ok && slices.ContainsFunc(scenarios, isDSScenario) {
			b.printf("ds-reference: @durable-streams/server from %s, %s\n", d.dir, d.mode())
		}
		if m, ok := t.(*mercure); ok {
			b.printf("mercure: %s, bolt transport (a bolt commit, so an fsync, per publish)\n", m.bin)
		}
	}
	for _, c := range cases {
		if ctx.Err() != nil {
			break
		}
		b.runCase(ctx, c)
	}
	if *svgOut != "" {
		if err := os.WriteFile(*svgOut, []byte(b.svg()), 0o644); err != nil { //nolint:gosec // a chart for people to read
			return fail(err)
		}
		b.printf("chart: %s\n", *svgOut)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "edgeload bench: interrupted")
		return 1
	}
	if b.failed {
		b.printf("FAIL: edgehub broke a delivery rule or failed (see above)\n")
		return 1
	}
	if b.outErr != nil {
		fmt.Fprintln(os.Stderr, "edgeload bench: writing the results:", b.outErr)
		return 1
	}
	return 0
}

// parseFanout reads WATCHERSxRATE cases such as 1000x100,5000x20.
func parseFanout(s string) ([]fanoutSize, error) {
	var fs []fanoutSize
	for _, c := range strings.Split(s, ",") {
		w, r, ok := strings.Cut(strings.TrimSuffix(strings.TrimSpace(c), "/s"), "x")
		wn, err1 := strconv.Atoi(w)
		rn, err2 := strconv.Atoi(r)
		if !ok || err1 != nil || err2 != nil || wn < 1 || rn < 1 {
			return nil, fmt.Errorf("bad fan-out case %q: want WATCHERSxRATE such as 1000x100", c)
		}
		fs = append(fs, fanoutSize{wn, rn})
	}
	return fs, nil
}

// build compiles one of this module's commands into dir.
func build(dir, name string) (string, error) {
	out := filepath.Join(dir, name)
	fmt.Fprintf(os.Stderr, "edgeload bench: building %s\n", name)
	cmd := exec.Command("go", "build", "-o", out, "github.com/edgehub/edgehub/cmd/"+name)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s (run from the repository, or give its binary): %w", name, err)
	}
	return out, nil
}

// raiseOpenFiles lifts this process's soft open-files limit to the hard
// one (the servers it starts inherit it) and returns it.
func raiseOpenFiles() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 1024
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) //nolint:errcheck // read back what holds
		}
	}
	return l.Cur
}

// bench runs the cases and keeps every measurement for the report.
type bench struct {
	targets []Target
	rounds  int
	tmp     string
	out     io.Writer
	json    io.Writer
	results []caseResult
	failed  bool  // Edgehub broke a rule or failed
	outErr  error // the first failed write of the table or the JSON lines
}

type caseResult struct {
	c  *benchCase
	ms []measurement
}

func (b *bench) cases(scenarios []string, sz sizes) []*benchCase {
	var cs []*benchCase
	lat := []string{"p50_ms", "p90_ms", "p99_ms", "max_ms"}
	strict := func(t Target) bool { _, native := t.(*edgehub); return native } // its positions are the counters
	for _, s := range scenarios {
		switch s {
		case "publish1", "publish16":
			c, n := 1, sz.publish1
			if s == "publish16" {
				c, n = 16, sz.publish16
			}
			cs = append(cs, &benchCase{scenario: s,
				title: fmt.Sprintf("%s: %d events from %s on one topic, each waiting for its answer", s, n,
					map[bool]string{true: "1 publisher", false: fmt.Sprintf("%d concurrent publishers", c)}[c == 1]),
				params:  map[string]any{"publishers": c, "events": n},
				metrics: append([]string{"events_per_s"}, lat...),
				run: func(ctx context.Context, t Target) (*result, error) {
					return publishers(ctx, t, c, n)
				}})
		case "topics16":
			n := sz.topics16
			cs = append(cs, &benchCase{scenario: s,
				title: fmt.Sprintf("topics16: %d events from 16 concurrent publishers over %d topics (round-robin), "+
					"each waiting for its answer", n, spreadTopics),
				params:  map[string]any{"publishers": 16, "events": n, "topics": spreadTopics},
				metrics: append([]string{"events_per_s"}, lat...),
				run: func(ctx context.Context, t Target) (*result, error) {
					return topicsSpread(ctx, t, 16, n, spreadTopics)
				}})
		case "tenants16":
			n := sz.tenants16
			cs = append(cs, &benchCase{scenario: s,
				title: fmt.Sprintf("tenants16: %d events from 16 concurrent publishers, each on a tenant of its own "+
					"(Edgehub: bench-0..15, publisher i on process i mod N; peers: a topic each), each waiting for its answer", n),
				params:  map[string]any{"publishers": 16, "events": n, "tenants": 16},
				metrics: append([]string{"events_per_s"}, lat...),
				run: func(ctx context.Context, t Target) (*result, error) {
					return tenantsSpread(ctx, t, 16, n)
				}})
		case "batch":
			n := sz.batches
			cs = append(cs, &benchCase{scenario: s,
				title:   fmt.Sprintf("batch: %d batches of %d events (about 100 bytes each), one at a time", n, batchSize),
				params:  map[string]any{"batches": n, "batch_size": batchSize},
				metrics: append([]string{"events_per_s"}, lat...),
				run: func(ctx context.Context, t Target) (*result, error) {
					return batches(ctx, t, n, batchSize)
				}})
		case "fanout":
			for _, f := range sz.fanout {
				d := sz.fanoutFor
				cs = append(cs, &benchCase{scenario: s,
					title: fmt.Sprintf("fanout: %d watchers on one topic, %d events/s for %v; latency from publish to receipt",
						f.watchers, f.rate, d),
					params: map[string]any{"watchers": f.watchers, "rate": f.rate, "seconds": d.Seconds()},
					metrics: append(append([]string{}, lat...),
						"publish_rate", "deliveries_per_s", "open_s"),
					run: func(ctx context.Context, t Target) (*result, error) {
						return fanout(ctx, t, f.watchers, f.rate, d, strict(t))
					}})
			}
		case "idle":
			n, settle := sz.idle, sz.settle
			cs = append(cs, &benchCase{scenario: s,
				title:   fmt.Sprintf("idle: %d idle streams on 100 topics; the server's resident memory (VmRSS)", n),
				params:  map[string]any{"streams": n, "topics": 100},
				metrics: []string{"rss_before_mib", "rss_after_mib", "kib_per_stream"},
				run: func(ctx context.Context, t Target) (*result, error) {
					return idle(ctx, t, n, settle)
				}})
		case "tenant-idle":
			for _, n := range []int{0, sz.idle} {
				cs = append(cs, &benchCase{scenario: s,
					title: fmt.Sprintf("tenant-idle: publish16 (%d events) on a tenant holding %d idle tenant streams "+
						"of other topics (half exact, half patterns)", sz.publish16, n),
					params:  map[string]any{"publishers": 16, "events": sz.publish16, "tenant_streams": n},
					metrics: append([]string{"events_per_s"}, lat...),
					run: func(ctx context.Context, t Target) (*result, error) {
						return tenantIdle(ctx, t, n, sz.publish16)
					}})
			}
		case "catchup":
			n := sz.catchup
			cs = append(cs, &benchCase{scenario: s,
				title:   fmt.Sprintf("catchup: one watcher reads %d stored events from the start", n),
				params:  map[string]any{"events": n},
				metrics: []string{"events_per_s", "seconds", "complete"},
				run: func(ctx context.Context, t Target) (*result, error) {
					return catchup(ctx, t, n, strict(t))
				}})
		case "mercure-fanout":
			for _, f := range sz.fanout {
				d := sz.fanoutFor
				cs = append(cs, &benchCase{scenario: s,
					title: fmt.Sprintf("mercure-fanout: %d Mercure subscribers of 3 selectors each (the topic, a topic of their own, "+
						"a URL pattern that matches the topic too), %d updates/s for %v; latency from publish to receipt",
						f.watchers, f.rate, d),
					params: map[string]any{"watchers": f.watchers, "rate": f.rate, "seconds": d.Seconds(), "selectors": 3},
					metrics: append(append([]string{}, lat...),
						"publish_rate", "deliveries_per_s", "open_s"),
					run: func(ctx context.Context, t Target) (*result, error) {
						return mercureFanout(ctx, t, f.watchers, f.rate, d)
					}})
			}
		case "mercure-resume":
			n := sz.catchup
			cs = append(cs, &benchCase{scenario: s,
				title: fmt.Sprintf("mercure-resume: %d updates over %d topics (a publisher each), then one Mercure subscriber "+
					"of the %d resumes from earliest", n, resumeTopics, resumeTopics),
				params:  map[string]any{"events": n, "topics": resumeTopics},
				metrics: []string{"events_per_s", "seconds", "complete"},
				run: func(ctx context.Context, t Target) (*result, error) {
					return mercureResume(ctx, t, n)
				}})
		case "ds-append":
			for _, c := range []int{1, 16} {
				n := sz.dsAppend1
				if c == 16 {
					n = sz.dsAppend16
				}
				who := "1 appender"
				if c > 1 {
					who = fmt.Sprintf("%d concurrent appenders", c)
				}
				cs = append(cs, &benchCase{scenario: s,
					title: fmt.Sprintf("ds-append: %d Durable Streams appends of one JSON message (about 100 bytes) "+
						"to one stream from %s, each waiting for its answer; then the stream is read back", n, who),
					params:  map[string]any{"appenders": c, "messages": n},
					metrics: append([]string{"appends_per_s"}, lat...),
					run: func(ctx context.Context, t Target) (*result, error) {
						return dsAppenders(ctx, t, c, n)
					}})
			}
		case "ds-sse":
			readers, rate, d := sz.dsReaders, sz.dsRate, sz.dsFor
			cs = append(cs, &benchCase{scenario: s,
				title: fmt.Sprintf("ds-sse: %d Durable Streams SSE readers of one JSON stream from offset -1, "+
					"%d appends/s for %v; latency from append to receipt", readers, rate, d),
				params: map[string]any{"readers": readers, "rate": rate, "seconds": d.Seconds()},
				metrics: append(append([]string{}, lat...),
					"append_rate", "deliveries_per_s", "open_s", "sse_reconnects"),
				run: func(ctx context.Context, t Target) (*result, error) {
					return dsSSE(ctx, t, readers, rate, d)
				}})
		case "topics":
			n := sz.topics
			cs = append(cs, &benchCase{scenario: s,
				title:  fmt.Sprintf("topics: %d topics touched once (one event each, 16 publishers)", n),
				params: map[string]any{"topics": n},
				metrics: []string{"topics_per_s", "seconds", "rss_after_mib", "hubs_active_after", "passivated_s",
					"hubs_active_end", "rss_passivated_mib"},
				run: func(ctx context.Context, t Target) (*result, error) {
					return topics(ctx, t, n)
				}})
		}
	}
	return cs
}

// runCase runs c in b.rounds rounds, each target once a round in order,
// each time on a freshly started server, then reports.
func (b *bench) runCase(ctx context.Context, c *benchCase) {
	cr := caseResult{c: c}
	for round := 1; round <= b.rounds && ctx.Err() == nil; round++ {
		for _, t := range b.targets {
			if !t.Supports(c.scenario) || ctx.Err() != nil {
				continue
			}
			m := b.runOne(ctx, c, t, round)
			cr.ms = append(cr.ms, m)
			status := "ok"
			if m.Error != "" {
				status = "error: " + firstLine(m.Error)
			} else if n := m.Violations.total(); n > 0 {
				status = fmt.Sprintf("%d violations", n)
			}
			fmt.Fprintf(os.Stderr, "  %s round %d/%d %s: %s (%.1fs)\n", caseName(c), round, b.rounds, t.Name(), status, m.Seconds)
			if strings.HasPrefix(t.Name(), "edgehub") && (m.Error != "" || m.Violations.total() > 0) {
				b.failed = true
			}
			b.writeJSON(m)
		}
	}
	b.results = append(b.results, cr)
	b.report(cr)
}

func (b *bench) runOne(ctx context.Context, c *benchCase, t Target, round int) (m measurement) {
	m = measurement{Target: t.Name(), Round: round, Scenario: c.scenario, Case: caseName(c), Params: c.params}
	start := time.Now()
	defer func() { m.Seconds = time.Since(start).Seconds() }()
	dir, err := os.MkdirTemp(b.tmp, t.Name())
	if err != nil {
		m.Error = err.Error()
		return m
	}
	defer os.RemoveAll(dir) //nolint:errcheck // a temporary directory
	rctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	if err := t.Start(rctx, dir); err != nil {
		m.Error = "start: " + err.Error()
		return m
	}
	r, err := c.run(rctx, t)
	// Idle keep-alive connections would hold up a graceful shutdown
	// (Centrifugo's waits seconds for them) and must not outlive the server.
	poster.CloseIdleConnections()
	if stopErr := t.Stop(); stopErr != nil && err == nil {
		err = stopErr
	}
	if r != nil {
		m.Metrics, m.Violations = r.metrics, r.violations
	}
	if err != nil {
		m.Error = err.Error()
	}
	return m
}

func caseName(c *benchCase) string {
	switch c.scenario {
	case "fanout", "mercure-fanout":
		return fmt.Sprintf("%s-%vx%v", c.scenario, c.params["watchers"], c.params["rate"])
	case "ds-append":
		return fmt.Sprintf("ds-append-%v", c.params["appenders"])
	case "ds-sse":
		return fmt.Sprintf("ds-sse-%vx%v", c.params["readers"], c.params["rate"])
	}
	return c.scenario
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
