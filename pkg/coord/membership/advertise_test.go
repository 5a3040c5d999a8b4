package membership

import (
	"net"
	"os"
	"testing"
)

func TestAdvertiseAddrReplacesTheAnyAddressWithTheHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip("no hostname")
	}
	cases := map[string]string{
		"0.0.0.0:9090":   net.JoinHostPort(host, "9090"),
		"[::]:9090":      net.JoinHostPort(host, "9090"),
		"127.0.0.1:9090": "127.0.0.1:9090",
		"10.1.2.3:8080":  "10.1.2.3:8080",
	}
	for in, want := range cases {
		addr, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AdvertiseAddr(addr)
		if err != nil || got != want {
			t.Errorf("AdvertiseAddr(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
}
