//go:build !faults

package httpapi

func injectedFaults() faultHooks { return faultHooks{} }
