package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/go-client.md names every exported field of each of the package's
// types that it shows: a reader who meets client.Tenant there finds
// Tenant.Name, not a guess.
func TestTheGuideNamesTheFieldsOfItsTypes(t *testing.T) {
	guide, err := os.ReadFile("../docs/go-client.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(guide)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	shown := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok || !spec.Name.IsExported() {
				return true
			}
			st, ok := spec.Type.(*ast.StructType)
			name := spec.Name.Name
			if !ok || !regexp.MustCompile("(`|client\\.)"+name+"\\b").MatchString(doc) {
				return true
			}
			shown++
			for _, field := range st.Fields.List {
				for _, id := range field.Names {
					if id.IsExported() && !regexp.MustCompile("(`|\\.)"+id.Name+"\\b|\\b"+id.Name+":").MatchString(doc) {
						t.Errorf("docs/go-client.md shows %s but not its field %s", name, id.Name)
					}
				}
			}
			return true
		})
	}
	if shown < 10 {
		t.Fatalf("the guide shows %d of the package's types; the test reads it wrong", shown)
	}
}
