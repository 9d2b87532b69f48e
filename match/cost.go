package match

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
)

// The most one selector may cost (Estimate), so that no selector makes
// a test of a topic cost more than a bounded amount, nor holds more than
// a bounded part of its subscription's charge.
const (
	// MaxHeap is the heap one compiled selector may hold (estimated).
	MaxHeap = 1 << 20
	// MaxWork bounds one selector's matching work per byte of a tested
	// topic, in steps of about 0.3 ns (stepPerThread): about 40 ms for a
	// topic of 1024 bytes at the worst, far less for the patterns met in
	// practice.
	MaxWork = 1 << 17
	// MaxSelectionWork bounds the same for all the selectors of one
	// subscription: about 0.3 s for a topic of 1024 bytes at the worst.
	MaxSelectionWork = 1 << 20
)

// Cost is what a subscriber's selector costs once compiled, counted
// before it is.
type Cost struct {
	// Heap is what the compiled selector holds, at least: what its
	// subscription is charged for it.
	Heap int64
	// Work is its matching work per byte of a tested topic, at most, in
	// the units of MaxWork.
	Work int64
}

// Estimate counts what a subscriber's selector will cost once compiled
// at base (CompileAt), without compiling it, so that a subscription
// takes what its selectors cost before it spends the time to compile
// them; one over MaxHeap or MaxWork is refused. A URL pattern is counted
// from the expression it compiles to, a URI template from its length
// (templateCost), any other selector from its text.
func Estimate(kind Kind, pattern, base string) (Cost, error) {
	var c Cost
	switch {
	case pattern == "*":
	case kind == URLPattern:
		c = urlPatternCost(pattern, base)
	case kind == Template && strings.Contains(pattern, "{"):
		c = templateCost(pattern)
	}
	c.Heap = max(c.Heap, plainHeap(pattern))
	switch {
	case c.Heap > MaxHeap:
		return c, fmt.Errorf("selector %.32q… compiles to about %d KiB, more than the %d KiB one selector may hold", pattern, c.Heap>>10, MaxHeap>>10)
	case c.Work > MaxWork:
		return c, fmt.Errorf("selector %.32q… is too costly to match (about %d steps per byte of a topic; at most %d)", pattern, c.Work, MaxWork)
	}
	return c, nil
}

// The estimate's terms for a URL pattern, calibrated against the heap
// measured for the costliest selectors of 1024 bytes and for everyday
// ones (TestEstimateIsNeverBelowTheHeap): a compiled pattern's fixed part
// (go-urlpattern compiles eight components), and its bytes per
// instruction of the expression it compiles to, per rune of its
// character classes and per capture.
const (
	urlPatternBase = 8 << 10
	perInst        = 112
	perRune        = 24
	perCap         = 256
)

// The terms for a URI template, calibrated the same way: a fixed part,
// bytes per byte of the template and per byte of its expressions
// ({…}), and the matching threads per byte of its expressions
// (TestTemplatesCostNoMoreThanTheirBound).
const (
	templateBase         = 2 << 10
	templatePerByte      = 64
	templatePerInside    = 400
	templateLoopsPerByte = 8
)

// stepPerThread is, in the units of MaxWork, what one matching thread
// costs per byte of the topic; copying one capture costs one unit more,
// when go-urlpattern asks for submatches (measured: a thread step about
// 4 ns, a capture copied about 0.3 ns).
const stepPerThread = 13

// urlPatternCost is what the URL pattern compiles to, counted from the
// expression the URL Pattern standard would build for it (nearly: see
// urlPatternRegexp), with what it takes of the base as fixed text (its
// host, and its path too for a pattern that is a relative path). One
// whose expression does not parse is charged the most a selector may
// cost: compiling it will almost surely fail, and say why.
func urlPatternCost(pattern, base string) Cost {
	s, ok := shapeOfRegexp(urlPatternRegexp(pattern))
	if !ok {
		return Cost{Heap: MaxHeap, Work: MaxWork}
	}
	if n := int64(baseTaken(pattern, base)); n > 0 {
		s.insts += n
		s.runes += n
	}
	return Cost{
		Heap: urlPatternBase + perInst*s.insts + perRune*s.runes + perCap*s.caps + plainHeap(pattern),
		// go-urlpattern tests with submatches: each thread carries the
		// captures, copied as it moves.
		Work: (s.loops + 1) * (stepPerThread + s.caps),
	}
}

// baseTaken is how much of base a URL pattern compiles as fixed text:
// none for an absolute pattern, the host (and port) for one that starts
// with '/', and the path too for any other.
func baseTaken(pattern, base string) int {
	if i := strings.Index(pattern, "://"); i >= 0 && !strings.ContainsAny(pattern[:i], "/?#") {
		return 0
	}
	rest := base
	if i := strings.Index(base, "://"); i >= 0 {
		rest = base[i+3:]
	}
	if strings.HasPrefix(pattern, "/") {
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			return j
		}
	}
	return len(rest)
}

// templateCost bounds what a URI template compiles to by its length,
// without compiling it: uritemplate builds its expression only when it
// compiles it. The bytes of its expressions ({…}) make the choices its
// matching runs through.
func templateCost(pattern string) Cost {
	inside, depth := 0, 0
	for i := 0; i < len(pattern); i++ {
		switch {
		case pattern[i] == '{':
			depth++
		case pattern[i] == '}' && depth > 0:
			depth--
		case depth > 0:
			inside++
		}
	}
	return Cost{
		Heap: templateBase + templatePerByte*int64(len(pattern)) + templatePerInside*int64(inside) + plainHeap(pattern),
		Work: stepPerThread * templateLoopsPerByte * int64(inside+1),
	}
}

// plainHeap is what a selector that compiles to nothing holds: its text,
// kept twice (the matcher's and the subscription's own), and its entry.
func plainHeap(pattern string) int64 { return 2*int64(len(pattern)) + 128 }

// shape is what a selector compiles to, counted before it is compiled:
// the instructions and the runes of the regular expressions it becomes,
// and their capture groups.
type shape struct {
	insts, runes, caps int64
	// loops is the instructions under a choice (a repetition or an
	// alternation): the threads a match may run at once.
	loops int64
}

// shapeOf counts what a regular expression compiles to, as
// regexp/syntax's Simplify and Compile would build it, without building
// it: a counted repetition is its operand that many times.
func shapeOf(re *syntax.Regexp) shape {
	var s shape
	var walk func(re *syntax.Regexp, times int64, inLoop bool)
	walk = func(re *syntax.Regexp, times int64, inLoop bool) {
		choice := re.Op == syntax.OpStar || re.Op == syntax.OpPlus || re.Op == syntax.OpQuest ||
			re.Op == syntax.OpAlternate || re.Op == syntax.OpRepeat && re.Max != re.Min
		if choice && !inLoop {
			before := s.insts
			defer func() { s.loops += s.insts - before }()
		}
		inLoop = inLoop || choice
		switch re.Op {
		case syntax.OpLiteral:
			s.insts += times * int64(len(re.Rune))
			s.runes += times * int64(len(re.Rune))
		case syntax.OpCharClass:
			s.insts += times
			s.runes += times * int64(len(re.Rune))
		case syntax.OpRepeat:
			n := int64(max(re.Max, re.Min, 1))
			s.insts += times * (n + 1)
			walk(re.Sub[0], times*n, inLoop)
		default:
			// Captures take two instructions, the rest one (and an
			// alternation or a concatenation one per operand).
			s.insts += times * int64(max(1, len(re.Sub)))
			if re.Op == syntax.OpCapture {
				s.insts += times
			}
			for _, sub := range re.Sub {
				walk(sub, times, inLoop)
			}
		}
	}
	walk(re, 1, false)
	s.caps = int64(re.MaxCap())
	return s
}

// shapeOfRegexp counts what the regular expression expr compiles to; ok
// is false when it does not parse.
func shapeOfRegexp(expr string) (shape, bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return shape{}, false
	}
	return shapeOf(re), true
}

// urlPatternRegexp is, nearly, the regular expression a URL pattern
// compiles to (the WHATWG URL Pattern standard's, which go-urlpattern
// builds per component): fixed text as itself (percent-encoded where the
// URL's canonical form encodes it), a named group or a wildcard as its
// wildcard, a regexp group as its body, each in a capture group, and a
// part repeated by * or + twice, as the standard's expression has it.
// It is what the cost of the pattern is counted on before it is compiled.
func urlPatternRegexp(pattern string) string {
	var b strings.Builder
	rs := []rune(pattern)
	// part is the expression of the last part written, which a modifier
	// after it repeats; "" when the last token was fixed text.
	part := ""
	modify := func(m rune) {
		switch m {
		case '?':
			b.WriteByte('?')
		default: // * and +: the part once more, repeated
			b.WriteString("(?:" + part + ")*")
		}
		part = ""
	}
	group := -1 // where the {…} group being read starts in b, or -1
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\\' && i+1 < len(rs):
			i++
			b.WriteString(literal(rs[i]))
			part = ""
		case c == ':' && i+1 < len(rs) && isNameStart(rs[i+1]):
			j := i + 1
			for j < len(rs) && isNamePart(rs[j]) {
				j++
			}
			i = j - 1
			value := `[^/]+?`
			if j < len(rs) && rs[j] == '(' {
				if body, end, ok := regexpToken(rs, j); ok {
					value, i = body, end
				}
			}
			part = "(" + value + ")"
			b.WriteString(part)
		case c == '(':
			body, end, ok := regexpToken(rs, i)
			if !ok {
				b.WriteString(literal(c))
				part = ""
				continue
			}
			i = end
			part = "(" + body + ")"
			b.WriteString(part)
		case c == '*' && part != "":
			modify(c)
		case c == '*':
			part = "(.*)"
			b.WriteString(part)
		case (c == '?' || c == '+') && part != "":
			modify(c)
		case c == '{' && group < 0:
			b.WriteString("(?:")
			group = b.Len()
			part = ""
		case c == '}' && group >= 0:
			part = "(?:" + b.String()[group:] + ")"
			b.WriteString(")")
			group = -1
		default:
			b.WriteString(literal(c))
			part = ""
		}
	}
	if group >= 0 {
		b.WriteString(")")
	}
	return b.String()
}

// regexpToken reads the standard's regexp token that starts at rs[i],
// '(': its body, up to the ')' that closes it, and the index of that
// ')'; ok is false when it is not one.
func regexpToken(rs []rune, i int) (body string, end int, ok bool) {
	depth := 1
	for j := i + 1; j < len(rs); j++ {
		switch rs[j] {
		case '\\':
			j++
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				if j == i+1 {
					return "", 0, false
				}
				return string(rs[i+1 : j]), j, true
			}
		}
	}
	return "", 0, false
}

// literal is the expression of one character of fixed text: itself, or
// the percent-encoded bytes a URL's canonical form has for it.
func literal(c rune) string {
	if c < 0x80 && c > ' ' && !strings.ContainsRune("\"<>`{}|^", c) {
		return regexp.QuoteMeta(string(c))
	}
	var b strings.Builder
	for range len(string(c)) {
		b.WriteString("%XX")
	}
	return b.String()
}

func isNameStart(c rune) bool {
	return c == '$' || c == '_' || unicode.IsLetter(c)
}

func isNamePart(c rune) bool {
	return isNameStart(c) || unicode.IsDigit(c) || unicode.Is(unicode.Mn, c) || unicode.Is(unicode.Mc, c)
}
