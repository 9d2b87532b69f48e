package match

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// shapes are the costliest kinds of selector text: each unit is repeated
// (with # numbered) up to 1024 bytes, or as far as CompileSelector
// admits it, so that each is at the bounds.
var shapes = []struct {
	name string
	kind Kind
	head string
	unit string
}{
	{"named groups", URLPattern, "", "/:p#"},
	{"named groups, absolute", URLPattern, "https://example.com", "/:p#"},
	{"hostname groups", URLPattern, "https://", ":h#."},
	{"search groups", URLPattern, "/x?", ":q#&"},
	{"wildcards", URLPattern, "", "/*"},
	{"repeated wildcards", URLPattern, "", "/(.*)*"},
	{"optional groups", URLPattern, "", "{/:p#}?"},
	{"repeated groups", URLPattern, "", "{/:p#}*"},
	{"alternatives", URLPattern, "", "/(a|b|c)"},
	{"negated classes", URLPattern, "", "/([^a])"},
	{"unicode classes", URLPattern, "", `/(\p{L})`},
	{"folded unicode classes", URLPattern, "/", `((?i)\p{L})`},
	{"counted repetition", URLPattern, "/", `(a{1,1000})`},
	{"small counted repetition", URLPattern, "", `/(a{1,20})`},
	{"fixed text", URLPattern, "", "/abcdefgh"},
	{"encoded fixed text", URLPattern, "/", "é"},
	{"template", Template, "", "/{p#}"},
	{"template query", Template, "", "{?p#}"},
	{"template reserved", Template, "", "/{+p#}"},
	{"template explode", Template, "", "{/p#*}"},
	{"template fragment", Template, "", "{#p#}"},
	{"template lists", Template, "/{", "p#,"},
	{"exact", Exact, "", "/abcdefgh"},
}

// atBounds is the longest text of the shape within 1024 bytes that
// CompileSelector admits, and how many units it has.
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
		if _, err := CompileSelector(kind, b.String(), base); err != nil {
			if best == "" {
				t.Logf("even one unit is refused: %v", err)
			}
			return best, units
		}
		best, units = b.String(), n
	}
}

// heldBy is the heap that n compiled copies of the selector hold, per
// copy, and the estimate CompileSelector charges for it.
func heldBy(t *testing.T, kind Kind, pattern, base string, n int) (held, estimate int64) {
	t.Helper()
	keep := make([]Matcher, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC() // and what sync.Pools kept
	runtime.ReadMemStats(&before)
	for i := range keep {
		m, err := CompileSelector(kind, pattern, base)
		if err != nil {
			t.Fatal(err)
		}
		keep[i] = m
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(n), keep[0].Heap()
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

// What a compiled selector holds is never more than CompileSelector
// estimates, for the costliest selectors it admits within 1024 bytes
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
// its length; a URI template too, once compiled. Everyday ones are far
// from both, and a wildcard or an exact topic costs its text alone.
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
		{Template, numbered("{/p#*}", 600), "KiB"}, // 4690 bytes: none of 1024 is refused
	} {
		_, err := CompileSelector(c.kind, c.pattern, base)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%.40q (%d bytes): %v, want a refusal saying %q", c.pattern, len(c.pattern), err, c.why)
		}
	}
	for _, c := range everyday {
		m, err := CompileSelector(c.kind, c.pattern, base)
		if err != nil || m.Heap() > 32<<10 || m.Work() > 1024 {
			t.Errorf("%q: heap %d, work %d, %v", c.pattern, m.Heap(), m.Work(), err)
		}
	}
	for _, c := range []struct {
		kind    Kind
		pattern string
	}{{URLPattern, "*"}, {Template, "*"}, {Exact, "x"}, {Template, "no template"}} {
		if m, err := CompileSelector(c.kind, c.pattern, base); err != nil || m.Heap() != plainHeap(c.pattern) || m.Work() != 0 {
			t.Errorf("%d %q: heap %d, work %d, %v", c.kind, c.pattern, m.Heap(), m.Work(), err)
		}
	}
}

// numbered is unit n times, with # numbered from 0.
func numbered(unit string, n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.ReplaceAll(unit, "#", fmt.Sprint(i)))
	}
	return b.String()
}
