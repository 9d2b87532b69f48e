package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

// labels name the metrics in the table.
var labels = map[string]string{
	"events_per_s":       "events/s",
	"p50_ms":             "p50 ms",
	"p90_ms":             "p90 ms",
	"p99_ms":             "p99 ms",
	"max_ms":             "max ms",
	"publish_rate":       "publisher's events/s",
	"deliveries_per_s":   "deliveries/s",
	"open_s":             "streams opened in s",
	"rss_before_mib":     "server RSS before, MiB",
	"rss_after_mib":      "server RSS after, MiB",
	"kib_per_stream":     "KiB per stream",
	"seconds":            "seconds",
	"complete":           "complete (1 yes, 0 no)",
	"topics_per_s":       "topics/s",
	"hubs_active_after":  "hubs active after",
	"passivated_s":       "all passivated after s",
	"hubs_active_end":    "hubs active at the end",
	"rss_passivated_mib": "server RSS then, MiB",
	"appends_per_s":      "appends/s",
	"append_rate":        "appender's appends/s",
	"sse_reconnects":     "SSE reads resumed",
}

// spread is the min, median and max of one metric over the rounds.
type spread struct{ min, med, max float64 }

func spreadOf(v []float64) (spread, bool) {
	if len(v) == 0 {
		return spread{}, false
	}
	s := slices.Clone(v)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{s[0], med, s[len(s)-1]}, true
}

// values collects one metric of one target over the rounds that measured it.
func (cr caseResult) values(target, metric string) []float64 {
	var v []float64
	for _, m := range cr.ms {
		if m.Target != target || m.Error != "" {
			continue
		}
		if x, ok := m.Metrics[metric]; ok {
			v = append(v, x)
		}
	}
	return v
}

func (cr caseResult) targets() []string {
	var ts []string
	for _, m := range cr.ms {
		if !slices.Contains(ts, m.Target) {
			ts = append(ts, m.Target)
		}
	}
	return ts
}

func num(x float64) string {
	// Three significant digits, no exponent; whole numbers as they are.
	switch a := math.Abs(x); {
	case math.Round(a*10)/10 >= 100 || x == math.Trunc(x):
		return fmt.Sprintf("%.0f", x)
	case math.Round(a*100)/100 >= 10:
		return fmt.Sprintf("%.1f", x)
	case math.Round(a*1000)/1000 >= 1:
		return fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.3f", x)
}

func (s spread) String() string {
	if s.min == s.max {
		return num(s.med)
	}
	return num(s.min) + " / " + num(s.med) + " / " + num(s.max)
}

// report prints one case's table: a row per metric, a column per target,
// each cell min / median / max over the rounds; then the violations and
// errors of each round, and for fan-out the fraction of the ceiling.
func (b *bench) report(cr caseResult) {
	ts := cr.targets()
	if len(ts) == 0 {
		return
	}
	rows := [][]string{append([]string{""}, ts...)}
	for _, metric := range cr.c.metrics {
		row := []string{labels[metric]}
		seen := false
		for _, t := range ts {
			if s, ok := spreadOf(cr.values(t, metric)); ok {
				row = append(row, s.String())
				seen = true
			} else {
				row = append(row, "-")
			}
		}
		if seen {
			rows = append(rows, row)
		}
	}
	row := []string{"violations"}
	for _, t := range ts {
		var v []float64
		for _, m := range cr.ms {
			if m.Target == t {
				v = append(v, float64(m.Violations.total()))
			}
		}
		s, _ := spreadOf(v)
		row = append(row, s.String())
	}
	rows = append(rows, row)

	b.printf("\n%s\n(min / median / max of %d rounds)\n", cr.c.title, b.rounds)
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	for _, r := range rows {
		var line strings.Builder
		for i, c := range r {
			if i == 0 {
				fmt.Fprintf(&line, "  %-*s", width[i], c)
			} else {
				fmt.Fprintf(&line, "   %*s", width[i], c)
			}
		}
		b.printf("%s\n", strings.TrimRight(line.String(), " "))
	}
	for _, m := range cr.ms {
		if len(m.Violations) > 0 {
			b.printf("  %s round %d: %s\n", m.Target, m.Round, m.Violations)
		}
		if m.Error != "" {
			b.printf("  %s round %d failed: %s\n", m.Target, m.Round, strings.TrimSpace(m.Error))
		}
	}
	fractions := b.fractions(cr)
	switch {
	case len(fractions) == 0:
	case cr.c.scenario == "publish1" || cr.c.scenario == "publish16":
		b.printf("  fraction of the ceiling (medians; events/s: target's / ceiling's, where the ceiling makes each publish durable, sharing an fdatasync with those written while the last ran):\n")
		for _, t := range ts {
			if f, ok := fractions[t]; ok {
				b.printf("    %-12s events/s %s\n", t, num(f["events_per_s"]))
			}
		}
	default:
		b.printf("  fraction of the ceiling (medians; latency: ceiling's / target's, deliveries/s: target's / ceiling's):\n")
		for _, t := range ts {
			if f, ok := fractions[t]; ok {
				b.printf("    %-12s p50 %s   p99 %s   deliveries/s %s\n", t,
					num(f["p50"]), num(f["p99"]), num(f["deliveries_per_s"]))
			}
		}
	}
	for _, peer := range []string{"ds-reference", "centrifugo", "mercure", "edgehub-base"} {
		b.reportRatios(cr, ts, peer)
	}
	for _, t := range ts {
		b.writeSummary(cr, t, fractions[t])
	}
}

// notRatioed are the metrics that reportRatios leaves out: counts, flags
// and durations that a ratio says nothing about.
var notRatioed = []string{"open_s", "sse_reconnects", "seconds", "complete", "hubs_active_after", "hubs_active_end",
	"passivated_s", "rss_passivated_mib"}

// reportRatios prints, for a case that peer took part in, each Edgehub
// target's medians over the peer's, metric by metric (above 1: a higher
// rate, or a longer latency or more memory, than the peer's).
func (b *bench) reportRatios(cr caseResult, ts []string, peer string) {
	if !slices.Contains(ts, peer) {
		return
	}
	for _, t := range ts {
		if !strings.HasPrefix(t, "edgehub") || t == peer {
			continue
		}
		var parts []string
		for _, metric := range cr.c.metrics {
			if slices.Contains(notRatioed, metric) {
				continue
			}
			te, ok1 := spreadOf(cr.values(t, metric))
			re, ok2 := spreadOf(cr.values(peer, metric))
			if ok1 && ok2 && re.med > 0 {
				parts = append(parts, fmt.Sprintf("%s %s", labels[metric], num(te.med/re.med)))
			}
		}
		if len(parts) > 0 {
			b.printf("  %s / %s (medians): %s\n", t, peer, strings.Join(parts, ", "))
		}
	}
}

// fractions are each target's fan-out, or publish rate, as a
// fraction of the ceiling's, from the medians over the rounds: 1 is what
// the bare durable writer does.
func (b *bench) fractions(cr caseResult) map[string]map[string]float64 {
	med := func(t, metric string) (float64, bool) {
		s, ok := spreadOf(cr.values(t, metric))
		return s.med, ok && s.med > 0
	}
	switch cr.c.scenario {
	case "fanout":
	case "publish1", "publish16":
		ce, ok := med("ceiling", "events_per_s")
		if !ok {
			return nil
		}
		out := map[string]map[string]float64{}
		for _, t := range cr.targets() {
			if te, ok := med(t, "events_per_s"); ok && t != "ceiling" {
				out[t] = map[string]float64{"events_per_s": te / ce}
			}
		}
		return out
	default:
		return nil
	}
	c50, ok50 := med("ceiling", "p50_ms")
	c99, ok99 := med("ceiling", "p99_ms")
	cd, okd := med("ceiling", "deliveries_per_s")
	if !ok50 || !ok99 || !okd {
		return nil
	}
	out := map[string]map[string]float64{}
	for _, t := range cr.targets() {
		if t == "ceiling" {
			continue
		}
		t50, ok1 := med(t, "p50_ms")
		t99, ok2 := med(t, "p99_ms")
		td, ok3 := med(t, "deliveries_per_s")
		if ok1 && ok2 && ok3 {
			out[t] = map[string]float64{"p50": c50 / t50, "p99": c99 / t99, "deliveries_per_s": td / cd}
		}
	}
	return out
}

func (v violations) String() string {
	var kinds []string
	for k := range v {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, v[k]))
	}
	return strings.Join(parts, ", ")
}

// printf writes to the table's output and keeps its first error.
func (b *bench) printf(format string, a ...any) {
	if _, err := fmt.Fprintf(b.out, format, a...); err != nil && b.outErr == nil {
		b.outErr = err
	}
}

func (b *bench) writeJSON(v any) {
	if b.json == nil {
		return
	}
	line, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of numbers and strings
	}
	if _, err := b.json.Write(append(line, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "edgeload bench: writing JSON:", err)
		b.outErr = err
		b.json = nil
	}
}

// summary is the JSON line after a case's measurements, one per target.
type summary struct {
	Summary    bool               `json:"summary"`
	Target     string             `json:"target"`
	Scenario   string             `json:"scenario"`
	Case       string             `json:"case"`
	Params     map[string]any     `json:"params"`
	Rounds     int                `json:"rounds"`
	Min        map[string]float64 `json:"min"`
	Median     map[string]float64 `json:"median"`
	Max        map[string]float64 `json:"max"`
	Violations int64              `json:"violations_total"`
	Errors     int                `json:"errors"`
	Fraction   map[string]float64 `json:"fraction_of_ceiling,omitempty"`
}

func (b *bench) writeSummary(cr caseResult, t string, fraction map[string]float64) {
	s := summary{Summary: true, Target: t, Scenario: cr.c.scenario, Case: caseName(cr.c), Params: cr.c.params,
		Min: map[string]float64{}, Median: map[string]float64{}, Max: map[string]float64{}, Fraction: fraction}
	for _, m := range cr.ms {
		if m.Target != t {
			continue
		}
		s.Rounds++
		s.Violations += m.Violations.total()
		if m.Error != "" {
			s.Errors++
		}
	}
	for _, metric := range cr.c.metrics {
		if sp, ok := spreadOf(cr.values(t, metric)); ok {
			s.Min[metric], s.Median[metric], s.Max[metric] = sp.min, sp.med, sp.max
		}
	}
	b.writeJSON(s)
}
