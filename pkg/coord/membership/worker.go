package membership

import (
	"encoding/json"
	"fmt"
	"time"
)

// Worker is one worker's record, the value of P/workers/<instance>: how the master
// finds and calls it. JSON, so `etcdctl get --prefix P/workers/` reads well; the
// field names are the contract with the master and with operators.
//
// A worker from a static list (the master's WORKER_ENDPOINTS) has only an instance
// id and a gRPC address; the optional fields are then left out of the JSON. A
// registration always sets them all.
type Worker struct {
	InstanceID string    `json:"instance_id"`
	GRPCAddr   string    `json:"grpc_addr"`
	HTTPAddr   string    `json:"http_addr,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	Version    string    `json:"version,omitempty"`
}

// Parse decodes the record stored at key, naming the key on error.
func Parse(key string, value []byte) (Worker, error) {
	var w Worker
	if err := json.Unmarshal(value, &w); err != nil {
		return Worker{}, fmt.Errorf("worker record %s: %w", key, err)
	}
	return w, nil
}
