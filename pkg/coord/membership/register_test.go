package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// registrationLiveness bounds every wait for etcd to show a change.
const registrationLiveness = 30 * time.Second

func testRecord() Worker {
	return Worker{
		InstanceID: "w1",
		GRPCAddr:   "10.0.0.7:9090",
		HTTPAddr:   "10.0.0.7:8080",
		StartedAt:  time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Version:    "v1.2.3",
	}
}

// runRegistration runs a registration of testRecord under prefix until the
// returned stop is called (or the test ends); stop waits for Run to return.
func runRegistration(t *testing.T, client *clientv3.Client, prefix string, opts ...Option) (stop func()) {
	t.Helper()
	opts = append([]Option{WithPrefix(prefix), WithLeaseTTL(2 * time.Second),
		WithBackoff(10*time.Millisecond, 200*time.Millisecond)}, opts...)
	reg, err := NewRegistration(client, testRecord(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(registrationLiveness):
			t.Error("Run did not return after its context was cancelled")
		}
	}
	t.Cleanup(stop)
	return stop
}

// leaseLive reports whether etcd still holds the lease. etcd answers the
// remaining TTL in whole seconds, truncated: a live 2 s lease between two
// keepalives reads 0, and only -1 says the lease is gone.
func leaseLive(ttl *clientv3.LeaseTimeToLiveResponse) bool { return ttl != nil && ttl.TTL >= 0 }

// ttlOf and grantedOf read a TimeToLive answer for a failure message; %v of
// the answer prints only its header.
func ttlOf(ttl *clientv3.LeaseTimeToLiveResponse) int64 {
	if ttl == nil {
		return 0
	}
	return ttl.TTL
}

func grantedOf(ttl *clientv3.LeaseTimeToLiveResponse) int64 {
	if ttl == nil {
		return 0
	}
	return ttl.GrantedTTL
}

// waitRecord waits until key holds a record under a live lease other than not,
// and returns it.
func waitRecord(t *testing.T, client *clientv3.Client, key string, not int64) (value []byte, lease int64) {
	t.Helper()
	testwait.For(t, registrationLiveness, fmt.Sprintf("a record at %s under a lease other than %x", key, not), func() (bool, string) {
		resp, err := client.Get(context.Background(), key)
		if err != nil || len(resp.Kvs) != 1 {
			return false, fmt.Sprintf("get: %v, %v", resp, err)
		}
		value, lease = resp.Kvs[0].Value, resp.Kvs[0].Lease
		return lease != 0 && lease != not, fmt.Sprintf("lease %x", lease)
	})
	return value, lease
}

func TestRegistrationPutsTheRecordUnderALeaseAndRevokesItOnStop(t *testing.T) {
	client, _ := etcdtest.Start(t)
	stop := runRegistration(t, client, "/reg1")
	value, lease := waitRecord(t, client, "/reg1/workers/w1", 0)

	// The exact JSON is the contract with the master and etcdctl users: the same
	// bytes as before the record had a package of its own.
	if want := `{"instance_id":"w1","grpc_addr":"10.0.0.7:9090","http_addr":"10.0.0.7:8080",` +
		`"started_at":"2026-03-01T12:00:00Z","version":"v1.2.3"}`; string(value) != want {
		t.Errorf("record = %s, want %s", value, want)
	}
	// The exact JSON field names are the contract with the master and etcdctl users.
	var fields map[string]any
	if err := json.Unmarshal(value, &fields); err != nil {
		t.Fatalf("record %s: %v", value, err)
	}
	want := map[string]any{
		"instance_id": "w1", "grpc_addr": "10.0.0.7:9090", "http_addr": "10.0.0.7:8080",
		"started_at": "2026-03-01T12:00:00Z", "version": "v1.2.3",
	}
	if len(fields) != len(want) {
		t.Errorf("record %s has fields %v, want exactly %v", value, fields, want)
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("record field %s = %v, want %v", k, fields[k], v)
		}
	}
	rec, err := Parse("/reg1/workers/w1", value)
	if err != nil || rec != testRecord() {
		t.Errorf("Parse = %+v, %v; want %+v", rec, err, testRecord())
	}
	ttl, err := client.TimeToLive(context.Background(), clientv3.LeaseID(lease))
	if err != nil || !leaseLive(ttl) || ttl.GrantedTTL != 2 {
		t.Fatalf("lease %x: TTL %d granted %d, %v; want a live lease granted for 2s", lease, ttlOf(ttl), grantedOf(ttl), err)
	}

	stop()
	if resp, err := client.Get(context.Background(), "/reg1/workers/w1"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after stop: %v, %v; want the record gone at once (lease revoked)", resp, err)
	}
	if ttl, err := client.TimeToLive(context.Background(), clientv3.LeaseID(lease)); err != nil || ttl.TTL != -1 {
		t.Fatalf("after stop: lease %x: TTL %d, %v; want it revoked", lease, ttlOf(ttl), err)
	}
}

// A lease can be lost while the worker lives (revoked, or expired while etcd was
// away): the worker must register again, or the master never calls it again.
func TestRegistrationComesBackUnderANewLeaseAfterItsLeaseIsRevoked(t *testing.T) {
	client, _ := etcdtest.Start(t)
	runRegistration(t, client, "/reg2")
	_, lease := waitRecord(t, client, "/reg2/workers/w1", 0)
	if _, err := client.Revoke(context.Background(), clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	_, again := waitRecord(t, client, "/reg2/workers/w1", lease)
	if ttl, err := client.TimeToLive(context.Background(), clientv3.LeaseID(again)); err != nil || !leaseLive(ttl) {
		t.Fatalf("new lease %x: TTL %d, %v; want it live", again, ttlOf(ttl), err)
	}
}

func TestRegistrationPutsBackARecordDeletedWhileItsLeaseLives(t *testing.T) {
	client, _ := etcdtest.Start(t)
	runRegistration(t, client, "/reg3")
	_, lease := waitRecord(t, client, "/reg3/workers/w1", 0)
	if _, err := client.Delete(context.Background(), "/reg3/workers/w1"); err != nil {
		t.Fatal(err)
	}
	var back int64
	testwait.For(t, registrationLiveness, "the deleted record put back", func() (bool, string) {
		resp, err := client.Get(context.Background(), "/reg3/workers/w1")
		if err != nil || len(resp.Kvs) != 1 {
			return false, fmt.Sprintf("get: %v, %v", resp, err)
		}
		back = resp.Kvs[0].Lease
		return true, ""
	})
	if back != lease {
		t.Fatalf("record back under lease %x, want the same lease %x", back, lease)
	}
}

// etcd gone for longer than the lease TTL: the keepalive gives up, registration
// attempts fail while etcd is down, and the worker is registered again once etcd
// is back, under a live lease.
func TestRegistrationSurvivesAnEtcdOutageLongerThanItsLease(t *testing.T) {
	srv := etcdtest.StartServer(t)
	client := srv.Client(t)
	var log testwait.Log
	// The registration's records go to the test's output too: a failure shows
	// what it tried while etcd was away.
	logger := slog.New(slog.NewMultiHandler(&log, slog.NewTextHandler(t.Output(), nil)))
	runRegistration(t, client, "/reg4", WithLogger(logger))
	_, lease := waitRecord(t, client, "/reg4/workers/w1", 0)
	// The record can be in etcd before the registration knows it holds the lease:
	// a put applied whose answer the outage drops is an attempt that failed, and
	// such a registration has no lease to lose. Stop etcd once it holds one.
	testwait.For(t, registrationLiveness, "the registration to hold its lease", func() (bool, string) {
		return log.Count("worker registered") > 0, ""
	})

	srv.Stop()
	// The keepalive gives up once its deadline (a TTL) passes without etcd; the
	// registration says so and keeps trying.
	const lost = "worker registration lost (lease expired or revoked); registering again"
	testwait.For(t, registrationLiveness, "the registration to see its lease lost", func() (bool, string) {
		return log.Count(lost) > 0, ""
	})
	srv.Restart(t)

	// The old lease may have survived the restart (its TTL reset); either way the
	// record must end up under a lease the registration keeps alive.
	_, now := waitRecord(t, client, "/reg4/workers/w1", 0)
	time.Sleep(3 * time.Second) // longer than the TTL: only a kept-alive lease survives
	resp, err := client.Get(context.Background(), "/reg4/workers/w1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("after the outage the record did not stay: %v, %v (leases: before %x, after %x)", resp, err, lease, now)
	}
	ttl, err := client.TimeToLive(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil || !leaseLive(ttl) {
		t.Fatalf("lease %x after the outage: TTL %d, %v; want it live", resp.Kvs[0].Lease, ttlOf(ttl), err)
	}
}

// An attempt that etcd did not answer has waited for it already: the next one
// follows within the minimum backoff instead of a backoff doubled through the
// outage, so a worker is registered again moments after etcd is back. The etcd
// outage chaos campaign saw a worker come back 24 s after etcd did, skipped by
// every merge meanwhile. The backoff runs on a fake clock: stepping it by the
// minimum must release every wait.
func TestRegistrationRetriesSoonAfterAnAttemptEtcdDidNotAnswer(t *testing.T) {
	srv := etcdtest.StartServer(t)
	client := srv.Client(t)
	clk := clocktesting.NewFakeClock(time.Now())
	const minDelay = time.Second
	runRegistration(t, client, "/reg6", WithClock(clk), WithBackoff(minDelay, time.Minute), WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	waitRecord(t, client, "/reg6/workers/w1", 0)

	srv.Stop()
	// The first wait follows the lost lease, the second the first attempt that
	// timed out (registrationOpWait), the third the second one.
	for wait := 1; wait <= 3; wait++ {
		testwait.For(t, registrationLiveness, fmt.Sprintf("wait %d: the registration to wait for its next attempt", wait), func() (bool, string) {
			return clk.HasWaiters(), ""
		})
		clk.Step(minDelay)
		if clk.HasWaiters() {
			t.Fatalf("wait %d is longer than the minimum backoff %s while etcd does not answer", wait, minDelay)
		}
	}
}

func TestNewRegistrationRejectsBadInstanceIDAndTTL(t *testing.T) {
	client, _ := etcdtest.Start(t)
	rec := testRecord()
	rec.InstanceID = "a/b"
	if _, err := NewRegistration(client, rec); err == nil {
		t.Error("instance id with '/' accepted: it would escape P/workers/")
	}
	if _, err := NewRegistration(client, testRecord(), WithLeaseTTL(time.Second)); err == nil {
		t.Error("1s lease TTL accepted")
	}
}
