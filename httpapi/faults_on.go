//go:build faults

package httpapi

import (
	"net/http"
	"time"

	"github.com/edgehub/edgehub/faults"
)

// injectedFaults builds the hooks of the fault EDGEHUB_FAULT names:
// register-late sends a watch's status (so the client's onopen fires)
// before the stream is registered.
func injectedFaults() faultHooks {
	var f faultHooks
	if faults.On("register-late") {
		f.beforeRegister = func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush() //nolint:errcheck // injected fault
			time.Sleep(20 * time.Millisecond)
		}
	}
	return f
}
