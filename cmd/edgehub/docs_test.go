package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// Every relative link of README.md and docs/ names a file of the
// repository and, with a #fragment, a heading of that file, so a reader
// never follows a link into nothing. Links with a scheme are not checked.
func TestDocsLinksResolve(t *testing.T) {
	const root = "../.."
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"))
	link := regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	checked := 0
	for _, doc := range docs {
		for _, line := range prose(t, doc) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target, fragment, _ := strings.Cut(m[1], "#")
				if strings.Contains(target, ":") {
					continue
				}
				file := doc
				if target != "" {
					file = filepath.Join(filepath.Dir(doc), target)
				}
				checked++
				if rel, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: %s points outside the repository", doc, m[1])
					continue
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: %s: no such file", doc, m[1])
					continue
				}
				if fragment != "" && !slices.Contains(headingSlugs(t, file), fragment) {
					t.Errorf("%s: %s: no such heading", doc, m[1])
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no link checked")
	}
}

// prose is a Markdown file's lines outside fenced code blocks.
func prose(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line)
		}
	}
	return lines
}

// headingSlugs are the anchors a Markdown renderer gives a file's
// headings: lower case, spaces as hyphens, other punctuation dropped.
func headingSlugs(t *testing.T, file string) []string {
	t.Helper()
	if !strings.HasSuffix(file, ".md") {
		return nil
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	var slugs []string
	for _, line := range prose(t, file) {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			slugs = append(slugs, strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-"))
		}
	}
	return slugs
}
