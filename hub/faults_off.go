//go:build !faults

package hub

func injectedFaults() faultHooks { return faultHooks{} }
