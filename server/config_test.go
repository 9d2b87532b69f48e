package server_test

import (
	"reflect"
	"testing"

	"github.com/edgehub/edgehub/server"
)

// Defaults are the tags' defaults whatever the environment holds: an
// EDGEHUB_ variable changes the command line, not Defaults.
func TestDefaultsIgnoreTheEnvironment(t *testing.T) {
	want := server.Defaults()
	if want.Addr == "" || want.MaxBody == 0 || want.Heartbeat == 0 || want.MaxStreams == 0 {
		t.Fatalf("Defaults left flags with defaults at zero: %+v", want)
	}
	t.Setenv("EDGEHUB_ADDR", "0.0.0.0:1")
	t.Setenv("EDGEHUB_MAX_BODY", "7")
	t.Setenv("EDGEHUB_PUBLISH_RATE", "1")
	if got := server.Defaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("with EDGEHUB_ variables set, Defaults() = %+v, want %+v", got, want)
	}
}
