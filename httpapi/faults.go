package httpapi

import "net/http"

// faultHooks are the points where a binary built with -tags faults
// injects the bugs that the chaos checker must catch (faults_on.go). In
// any other build they are empty (faults_off.go).
type faultHooks struct {
	// beforeRegister, if set, runs before a watch registers with its hub.
	beforeRegister func(w http.ResponseWriter)
}

// answeredEarly reports whether a watch's response may have begun before
// its stream registered, when the connection is no longer net/http's to
// take over (a second status line would follow the first).
func (f faultHooks) answeredEarly() bool { return f.beforeRegister != nil }
