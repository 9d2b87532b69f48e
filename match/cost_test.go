package match

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// shapes are the costliest kinds of selector text: each unit is repeated
// (with ~ numbered) up to 1024 bytes, or as far as Estimate admits it,
// so that each is at the bounds.
var shapes = []struct {
	name string
	kind Kind
	head string
	unit string
}{
	{"named groups", URLPattern, "", "/:p~"},
	{"named groups, absolute", URLPattern, "https://example.com", "/:p~"},
	{"hostname groups", URLPattern, "https://", ":h~."},
	{"search groups", URLPattern, "/x?", ":q~&"},
	{"wildcards", URLPattern, "", "/*"},
	{"repeated wildcards", URLPattern, "", "/(.*)*"},
	{"optional groups", URLPattern, "", "{/:p~}?"},
	{"repeated groups", URLPattern, "", "{/:p~}*"},
	{"alternatives", URLPattern, "", "/(a|b|c)"},
	{"negated classes", URLPattern, "", "/([^a])"},
	{"unicode classes", URLPattern, "", `/(\p{L})`},
	{"folded unicode classes", URLPattern, "/", `((?i)\p{L})`},
	{"counted repetition", URLPattern, "/", `(a{1,1000})`},
	{"small counted repetition", URLPattern, "", `/(a{1,20})`},
	{"fixed text", URLPattern, "", "/abcdefgh"},
	{"encoded fixed text", URLPattern, "/", "é"},
	{"template", Template, "", "/{p~}"},
	{"template query", Template, "", "{?p~}"},
	{"template reserved", Template, "", "/{+p~}"},
	{"template explode", Template, "", "{/p~*}"},
	{"template fragment", Template, "", "{#p~}"},
	{"template lists", Template, "/{", "p~,"},
	{"template reserved explode", Template, "", "{+p~*}"},
	{"template fragment explode", Template, "", "{#p~*}"},
	{"template path parameters", Template, "", "{;p~*}"},
	{"template query explode", Template, "", "{?p~*}"},
	{"template labels", Template, "", "{.p~*}"},
	{"template explode lists", Template, "{/", "p~*,"},
	{"exact", Exact, "", "/abcdefgh"},
}

// atBounds is the longest text of the shape within 1024 bytes that
// Estimate admits, and how many units it has.
func atBounds(t *testing.T, kind Kind, head, unit, base string) (string, int) {
	t.Helper()
	best, units := "", 0
	for n := 1; ; n++ {
		var b strings.Builder
		b.WriteString(head + numbered(unit, n))
		if strings.HasSuffix(head, "{") {
			b.WriteString("z}")
		}
		if b.Len() > 1024 {
			return best, units
		}
		if _, err := Estimate(kind, b.String(), base); err != nil {
			if best == "" {
				t.Logf("even one unit is refused: %v", err)
			}
			return best, units
		}
		best, units = b.String(), n
	}
}

// heldBy is the heap that n compiled copies of the selector hold, per
// copy, and the estimate a subscription is charged for it.
func heldBy(t *testing.T, kind Kind, pattern, base string, n int) (held, estimate int64) {
	t.Helper()
	c, err := Estimate(kind, pattern, base)
	if err != nil {
		t.Fatal(err)
	}
	keep := make([]Matcher, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC() // and what sync.Pools kept
	runtime.ReadMemStats(&before)
	for i := range keep {
		m, err := CompileAt(kind, pattern, base)
		if err != nil {
			t.Fatal(err)
		}
		keep[i] = m
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(n), c.Heap
}

// everyday are selectors as Mercure applications write them.
var everyday = []struct {
	kind    Kind
	pattern string
}{
	{URLPattern, "/a"},
	{URLPattern, "/books/:id"},
	{URLPattern, "books/:id"},
	{URLPattern, "https://example.com/books/:id"},
	{URLPattern, "https://example.com/(books|authors)/:id{/*}?"},
	{URLPattern, "https://example.com/users/:user/books/:book?x=:q#frag"},
	{URLPattern, "/.well-known/mercure/subscriptions/*"},
	{Template, "/{a}"},
	{Template, "https://example.com/books/{id}"},
	{Template, "https://example.com/books/{id}{?page,size}"},
	{Exact, "https://example.com/books/1"},
}

// What a compiled selector holds is never more than Estimate says, for the costliest selectors it admits within 1024 bytes
// and for everyday ones, relative (against a hub URL with a long host
// too) and absolute.
func TestEstimateIsNeverBelowTheHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a few hundred large selectors")
	}
	bases := []string{"http://127.0.0.1:8080/v1/tenants/acme/.well-known/mercure",
		"https://" + strings.Repeat("h", 200) + ".example/.well-known/mercure"}
	for _, c := range everyday {
		for _, base := range bases {
			held, estimate := heldBy(t, c.kind, c.pattern, base, 40)
			t.Logf("%-56s base %3d bytes: held %6d, estimated %6d (%.1fx)", c.pattern, len(base), held, estimate, float64(estimate)/float64(max(held, 1)))
			if estimate < held {
				t.Errorf("%q: estimated %d bytes, held %d", c.pattern, estimate, held)
			}
		}
	}
	for _, shape := range shapes {
		for _, base := range bases {
			pattern, units := atBounds(t, shape.kind, shape.head, shape.unit, base)
			if pattern == "" {
				continue
			}
			held, estimate := heldBy(t, shape.kind, pattern, base, 8)
			t.Logf("%-24s %4d bytes, %3d units, base %3d bytes: held %7d, estimated %7d (%.1fx)",
				shape.name, len(pattern), units, len(base), held, estimate, float64(estimate)/float64(max(held, 1)))
			if estimate < held {
				t.Errorf("%s (%d bytes): estimated %d bytes, held %d", shape.name, len(pattern), estimate, held)
			}
		}
	}
}

// A selector over one of the bounds is refused before it is compiled: a
// URL pattern too large once compiled, or too costly to match, whatever
// its length; a URI template too long. Everyday ones are far from both,
// and a wildcard or an exact topic costs its text alone.
func TestCostlySelectorsAreRefused(t *testing.T) {
	base := "http://127.0.0.1:8080/.well-known/mercure"
	for _, c := range []struct {
		kind    Kind
		pattern string
		why     string
	}{
		{URLPattern, "/" + strings.Repeat(`(\p{L})`, 40), "KiB"},
		{URLPattern, "/(a{1,1000})(b{1,1000})(c{1,1000})(d{1,1000})(e{1,1000})", "KiB"},
		{URLPattern, strings.Repeat("/*", 300), "costly"},
		{URLPattern, strings.Repeat("/(.*)*", 150), "costly"},
		{Template, numbered("{/p~*}", 600), "KiB"}, // 4690 bytes: none of 1024 is refused
	} {
		_, err := Estimate(c.kind, c.pattern, base)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%.40q (%d bytes): %v, want a refusal saying %q", c.pattern, len(c.pattern), err, c.why)
		}
	}
	for _, c := range everyday {
		cost, err := Estimate(c.kind, c.pattern, base)
		if err != nil || cost.Heap > 32<<10 || cost.Work > 4096 {
			t.Errorf("%q: %+v, %v", c.pattern, cost, err)
		}
	}
	for _, c := range []struct {
		kind    Kind
		pattern string
	}{{URLPattern, "*"}, {Template, "*"}, {Exact, "x"}, {Template, "no template"}} {
		if cost, err := Estimate(c.kind, c.pattern, base); err != nil || cost.Heap != plainHeap(c.pattern) || cost.Work != 0 {
			t.Errorf("%d %q: %+v, %v", c.kind, c.pattern, cost, err)
		}
	}
}

// A URI template's cost is bounded by its length before it is compiled:
// the matching work of the expression it compiles to (counted as a URL
// pattern's is) is never more than the bound, for the costliest
// templates of 1024 bytes and everyday ones.
func TestTemplatesCostNoMoreThanTheirBound(t *testing.T) {
	var templates []string
	for _, shape := range shapes {
		if shape.kind == Template {
			pattern, _ := atBounds(t, Template, shape.head, shape.unit, "")
			templates = append(templates, pattern)
		}
	}
	for _, c := range everyday {
		if c.kind == Template {
			templates = append(templates, c.pattern)
		}
	}
	for _, pattern := range templates {
		m, err := CompileAt(Template, pattern, "")
		if err != nil {
			t.Fatalf("%.40q: %v", pattern, err)
		}
		if m.re == nil {
			continue // no template (0.x reads it as a topic): it compiles to nothing
		}
		s, _ := shapeOfRegexp(m.re.String())
		work := (s.loops + 1) * stepPerThread // matched without submatches
		bound, _ := Estimate(Template, pattern, "")
		t.Logf("%-40.40q %4d bytes: work %6d, bound %6d", pattern, len(pattern), work, bound.Work)
		if work > bound.Work {
			t.Errorf("%.40q: work %d, over its bound %d", pattern, work, bound.Work)
		}
	}
}

// numbered is unit n times, with ~ numbered from 0.
func numbered(unit string, n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.ReplaceAll(unit, "~", fmt.Sprint(i)))
	}
	return b.String()
}
