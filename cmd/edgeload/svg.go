package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
)

// point is one fan-out case of one target on the chart.
type point struct {
	watchers float64
	rate     int
	p50, p99 spread
}

// series are the chart's lines, one per target, through its fan-out
// cases in order of watchers.
type series struct {
	target string
	points []point
}

func (b *bench) fanoutSeries() []series {
	var ss []series
	for _, cr := range b.results {
		if cr.c.scenario != "fanout" {
			continue
		}
		for _, t := range cr.targets() {
			p50, ok1 := spreadOf(cr.values(t, "p50_ms"))
			p99, ok2 := spreadOf(cr.values(t, "p99_ms"))
			if !ok1 || !ok2 {
				continue
			}
			i := slices.IndexFunc(ss, func(s series) bool { return s.target == t })
			if i < 0 {
				ss = append(ss, series{target: t})
				i = len(ss) - 1
			}
			w, _ := cr.c.params["watchers"].(int)
			r, _ := cr.c.params["rate"].(int)
			ss[i].points = append(ss[i].points, point{float64(w), r, p50, p99})
		}
	}
	for i := range ss {
		slices.SortStableFunc(ss[i].points, func(a, b point) int { return int(a.watchers - b.watchers) })
	}
	return ss
}

var colors = map[string]string{"edgehub": "#1f77b4", "centrifugo": "#d62728", "ceiling": "#2ca02c",
	"edgehub-pg1": "#9467bd", "edgehub-pg2": "#8c564b", "edgehub-pg3": "#e377c2"}

// svg draws the fan-out's p50 (solid) and p99 (dashed) latency against
// the watcher count, both axes logarithmic: the median of the rounds,
// with a bar from the minimum to the maximum.
func (b *bench) svg() string {
	ss := b.fanoutSeries()
	const w, h, left, right, top, bottom = 820.0, 480.0, 70.0, 190.0, 50.0, 55.0
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&sb, `<rect width="%.0f" height="%.0f" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%.0f" y="24" font-size="15">Fan-out latency, publish to receipt, against watchers (median of %d rounds; bars: min to max)</text>`+"\n", left, b.rounds)
	if len(ss) == 0 {
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f">no fan-out measurements</text>`+"\n</svg>\n", left, h/2)
		return sb.String()
	}
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	var xs []float64
	rates := map[float64][]int{} // the rates measured at each watcher count
	allRates := map[int]bool{}
	for _, s := range ss {
		for _, p := range s.points {
			xmin, xmax = math.Min(xmin, p.watchers), math.Max(xmax, p.watchers)
			ymin, ymax = math.Min(ymin, p.p50.min), math.Max(ymax, p.p99.max)
			if !slices.Contains(xs, p.watchers) {
				xs = append(xs, p.watchers)
			}
			if !slices.Contains(rates[p.watchers], p.rate) {
				rates[p.watchers] = append(rates[p.watchers], p.rate)
			}
			allRates[p.rate] = true
		}
	}
	ymin = math.Max(ymin, 0.001)
	ymax = math.Max(ymax, ymin*10)
	lx0, lx1 := math.Log10(xmin)-0.15, math.Log10(xmax)+0.15
	ly0, ly1 := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	px := func(x float64) float64 { return left + (math.Log10(x)-lx0)/(lx1-lx0)*(w-left-right) }
	py := func(y float64) float64 {
		return h - bottom - (math.Log10(math.Max(y, 1e-6))-ly0)/(ly1-ly0)*(h-top-bottom)
	}
	// Axes, grid and ticks.
	fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n",
		left, top, w-left-right, h-top-bottom)
	for e := ly0; e <= ly1; e++ {
		for _, m := range []float64{1, 2, 5} {
			y := m * math.Pow(10, e)
			if math.Log10(y) > ly1+1e-9 {
				break
			}
			fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, w-right, py(y), py(y))
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, py(y)+4, num(y))
		}
	}
	slices.Sort(xs)
	for _, x := range xs {
		fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", px(x), px(x), top, h-bottom)
		label := num(x)
		if len(allRates) > 1 {
			var rs []string
			for _, r := range rates[x] {
				rs = append(rs, strconv.Itoa(r))
			}
			label += " at " + strings.Join(rs, ", ") + "/s"
		}
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), h-bottom+18, label)
	}
	axis := "watchers on one topic"
	if len(allRates) == 1 {
		for r := range allRates {
			axis += fmt.Sprintf(", %d events/s", r)
		}
	}
	fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+(w-left-right)/2, h-12, axis)
	fmt.Fprintf(&sb, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">latency, ms</text>`+"\n", top+(h-top-bottom)/2, top+(h-top-bottom)/2)
	// Lines, markers and bars.
	spare := []string{"#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}
	for i, s := range ss {
		color, ok := colors[s.target]
		if !ok {
			color = spare[i%len(spare)]
		}
		for _, pc := range []struct {
			get  func(point) spread
			dash string
		}{{func(p point) spread { return p.p50 }, ""}, {func(p point) spread { return p.p99 }, ` stroke-dasharray="6 4"`}} {
			var pts []string
			for _, p := range s.points {
				sp := pc.get(p)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.watchers), py(sp.med)))
				fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s"/>`+"\n",
					px(p.watchers), px(p.watchers), py(sp.min), py(sp.max), color)
				fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p.watchers), py(sp.med), color)
			}
			fmt.Fprintf(&sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n",
				strings.Join(pts, " "), color, pc.dash)
		}
		ly := top + 10 + float64(i)*40
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", w-right+14, ly, color, html.EscapeString(s.target))
		fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+
			`<text x="%.1f" y="%.1f">p50</text>`+"\n", w-right+14, w-right+40, ly+14, ly+14, color, w-right+46, ly+18)
		fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6 4"/>`+
			`<text x="%.1f" y="%.1f">p99</text>`+"\n", w-right+80, w-right+106, ly+14, ly+14, color, w-right+112, ly+18)
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}
