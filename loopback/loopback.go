// Package loopback says which hosts only this machine can reach. Dev mode,
// which asks no credentials, listens only on such a host, and edgeload
// measures only a hub on one; both ask this package, so they agree.
package loopback

import "net"

// Host reports whether host, a name or an IP address without a port, is
// "localhost" or a loopback address (127.0.0.0/8, ::1). No name is looked
// up.
func Host(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
