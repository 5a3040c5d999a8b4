package membership

import (
	"fmt"
	"net"
	"os"
)

// AdvertiseAddr is the address to advertise for a listener when none is configured:
// the listener's own address (so port 0 becomes the port the kernel chose), with an
// unspecified host (0.0.0.0, ::) replaced by the hostname, which other machines can
// resolve where an any-address means nothing.
func AdvertiseAddr(addr net.Addr) (string, error) {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "", fmt.Errorf("advertise address of %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("advertise address of %s: no hostname for the any-address: %w", addr, err)
		}
	}
	return net.JoinHostPort(host, port), nil
}
