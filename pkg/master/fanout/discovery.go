package fanout

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
		if strings.Contains(addr, "://") {
			// The reference's form: the worker's HTTP base URL. The master calls
			// workers over gRPC, on another port, which a URL cannot tell.
			return nil, fmt.Errorf("worker endpoint %q is a URL (the reference system's form, a worker's HTTP address): give the worker's gRPC address as host:port or instance=host:port (its --grpc-addr, GRPC_ADDR; port 9090 by default), or leave WORKER_ENDPOINTS empty to find the workers registered in etcd", part)
		}
		if !strings.Contains(addr, ":") {
			return nil, fmt.Errorf("worker endpoint %q: want host:port or instance=host:port", part)
		}
		out = append(out, Worker{InstanceID: name, GRPCAddr: addr})
	}
	return out, nil
}
