package hub

// faultHooks are the points where a binary built with -tags faults
// injects the bugs that the chaos checker must catch (faults_on.go). In
// any other build they are empty (faults_off.go) and the protocol runs
// as written.
type faultHooks struct {
	// publish, if set, takes over a publish on its way to the hub.
	publish func(r *Router, msg *publish)
	// overflow, if set, runs instead of demoting a stream whose queue is
	// full, and says whether it dealt with the item.
	overflow func(s *stream, it *item) bool
	// joinLive puts every stream in the live set as it registers, even a
	// stream that is behind the head.
	joinLive bool
}
