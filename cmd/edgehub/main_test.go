package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/edgehub/edgehub/server"
)

// parser builds the command line with no EDGEHUB_ variable set.
func parser(t *testing.T, c *cli) *kong.Kong {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "EDGEHUB_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
	k, err := kong.New(c, kong.Name("edgehub"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// server.Defaults is what edgehub serve runs with when given no flag but
// the one it needs (--dev, or an admin key).
func TestDefaultsAreTheCommandLines(t *testing.T) {
	var c cli
	if _, err := parser(t, &c).Parse([]string{"serve", "--dev"}); err != nil {
		t.Fatal(err)
	}
	want := server.Defaults()
	want.Dev = true
	if !reflect.DeepEqual(c.Serve.Config, want) {
		t.Errorf("edgehub serve runs with\n%+v\nserver.Defaults() is\n%+v", c.Serve.Config, want)
	}
}
