package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

// The flag tables of docs/operations.md and docs/api.md name every flag of
// serve, each with the default that its tag gives.
func TestDocsStateTheFlagDefaults(t *testing.T) {
	var c cli
	k := parser(t, &c)
	flags := map[string]*kong.Flag{}
	for _, n := range k.Model.Children {
		if n.Name == "serve" {
			for _, f := range n.Flags {
				flags[f.Name] = f
			}
		}
	}
	if len(flags) == 0 {
		t.Fatal("no serve flags")
	}
	row := regexp.MustCompile("^\\| (`--[^|]*) \\| ([^|]*) \\|")
	name := regexp.MustCompile("`--([a-z-]+)`")
	documented := map[string]bool{}
	for _, doc := range []string{"../../docs/operations.md", "../../docs/api.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			m := row.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			for _, n := range name.FindAllStringSubmatch(m[1], -1) {
				f := flags[n[1]]
				if f == nil {
					t.Errorf("%s: --%s is no flag of serve", doc, n[1])
					continue
				}
				documented[f.Name] = true
				if docDefault(m[2]) != tagDefault(f) {
					t.Errorf("%s: --%s defaults to %q, its tag to %q", doc, f.Name, m[2], f.Default)
				}
			}
		}
	}
	for n := range flags {
		if !documented[n] {
			t.Errorf("--%s is in neither docs/operations.md nor docs/api.md", n)
		}
	}
}

// docDefault and tagDefault write a default the same way: "" for none, a
// duration in Go's form, a size in bytes.
func docDefault(s string) string {
	s = strings.Trim(strings.TrimSpace(s), "`")
	if s == "off" || s == "none" {
		return ""
	}
	if d, err := time.ParseDuration(s); err == nil {
		return d.String()
	}
	for i, unit := range []string{" KiB", " MiB", " GiB"} {
		if n, err := strconv.ParseInt(strings.TrimSuffix(s, unit), 10, 64); err == nil && strings.HasSuffix(s, unit) {
			return strconv.FormatInt(n<<(10*(i+1)), 10)
		}
	}
	return s
}

func tagDefault(f *kong.Flag) string {
	if d, err := time.ParseDuration(f.Default); err == nil {
		return d.String()
	}
	return f.Default
}
