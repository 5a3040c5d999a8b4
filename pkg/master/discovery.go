package master

import (
	"context"
	"fmt"
	"strings"
)

// StaticDiscovery is a fixed worker list (WORKER_ENDPOINTS), for deployments whose
// workers do not register in etcd.
type StaticDiscovery []Worker

// Workers returns the list.
func (d StaticDiscovery) Workers(context.Context) ([]Worker, error) { return d, nil }

// ParseEndpoints parses WORKER_ENDPOINTS: a comma-separated list of host:port gRPC
// addresses, each optionally named "instance=host:port".
func ParseEndpoints(s string) (StaticDiscovery, error) {
	var out StaticDiscovery
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, addr, named := strings.Cut(part, "=")
		if !named {
			name, addr = part, part
		}
		if !strings.Contains(addr, ":") {
			return nil, fmt.Errorf("worker endpoint %q: want host:port or instance=host:port", part)
		}
		out = append(out, Worker{InstanceID: name, GRPCAddr: addr})
	}
	return out, nil
}
