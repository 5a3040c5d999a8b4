package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/worker/httpapi"
)

// workerAPIs are the workers' HTTP APIs (httpapi.NewServer over each worker's own
// stores and merger, as cmd/worker serves them) on loopback.
type workerAPIs struct {
	// urls are the base URLs, in worker order; clients their clients.
	urls    []string
	clients []*client.Client
	client  *http.Client
	// metrics are each worker's registry (its /metrics).
	metrics []*prometheus.Registry
	stop    context.CancelFunc
	served  sync.WaitGroup
}

// serveWorkerAPIs serves every worker's HTTP API on a loopback port until close.
// Its client keeps up to conns connections to each of them alive.
func serveWorkerAPIs(workers []*recordingWorker, conns int) (*workerAPIs, error) {
	ctx, stop := context.WithCancel(context.Background())
	a := &workerAPIs{stop: stop, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}}
	for _, wk := range workers {
		reg := prometheus.NewRegistry()
		srv, err := httpapi.NewServer(httpapi.ServerConfig{InstanceID: wk.id, Logger: quiet, Metrics: reg,
			Stores: wk.stores, Merger: wk.merger})
		if err != nil {
			a.close()
			return nil, fmt.Errorf("HTTP server of %s: %w", wk.id, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			a.close()
			return nil, fmt.Errorf("listen for %s: %w", wk.id, err)
		}
		a.served.Go(func() { _ = srv.Serve(ctx, ln) })
		a.urls = append(a.urls, "http://"+ln.Addr().String())
		// No bound but the phase's: an add's latency under overload is what is measured.
		wc, err := client.New(a.urls[len(a.urls)-1], client.WithHTTPClient(a.client), client.WithTimeout(-1))
		if err != nil {
			a.close()
			return nil, err
		}
		a.clients = append(a.clients, wc)
		a.metrics = append(a.metrics, reg)
	}
	return a, nil
}

// close stops the servers (each waits for its requests in flight) and the
// client's idle connections.
func (a *workerAPIs) close() {
	a.stop()
	a.served.Wait()
	a.client.CloseIdleConnections()
}

// histogram sums the workers' histogram name over its labels: how many
// observations, and their sum.
func (a *workerAPIs) histogram(name string) (count uint64, sum float64, err error) {
	for _, reg := range a.metrics {
		families, err := reg.Gather()
		if err != nil {
			return 0, 0, fmt.Errorf("worker metrics: %w", err)
		}
		for _, fam := range families {
			for _, m := range fam.GetMetric() {
				if fam.GetName() == name {
					count += m.GetHistogram().GetSampleCount()
					sum += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return count, sum, nil
}

// counter sums the workers' counter name over its labels.
func (a *workerAPIs) counter(name string) (sum float64, err error) {
	for _, reg := range a.metrics {
		families, err := reg.Gather()
		if err != nil {
			return 0, fmt.Errorf("worker metrics: %w", err)
		}
		for _, fam := range families {
			for _, m := range fam.GetMetric() {
				if fam.GetName() == name {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum, nil
}

// mean is sum over count as a duration of seconds (zero without observations).
func mean(count uint64, sum float64) time.Duration {
	if count == 0 {
		return 0
	}
	return time.Duration(sum / float64(count) * float64(time.Second))
}

// addOutcome is one add request of the overload phase.
type addOutcome struct {
	// at is when it was sent, from the phase's start.
	at      time.Duration
	latency time.Duration
	// status is the HTTP status (0: no answer); delay the backpressure header's
	// wait (zero without one).
	status int
	delay  time.Duration
	err    string
}

// addLog is the writers' record of their adds; the acknowledged rows go to in.
type addLog struct {
	in       *ingest
	mu       sync.Mutex
	outcomes []addOutcome
}

// writer sends an add of rows rows through wc every period, the first after phase,
// until ctx ends, and waits for each answer; a tick missed meanwhile is dropped.
func (l *addLog) writer(ctx context.Context, wc *client.Client, gen *rowGen, rows int, period, phase time.Duration, start time.Time) {
	if sleepCtx(ctx, phase) != nil {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		l.add(ctx, wc, gen, rows, start)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// add sends one add and records what came of it. An add cut off by the end of the
// phase is not counted (its rows may be durable: they are allowed, not required).
func (l *addLog) add(ctx context.Context, wc *client.Client, gen *rowGen, rows int, start time.Time) {
	records := make([]json.RawMessage, rows)
	ids := make([]string, rows)
	for i := range ids {
		ids[i] = gen.id()
		records[i] = gen.record(ids[i])
	}
	sent := time.Now()
	o := addOutcome{at: sent.Sub(start)}
	res, err := wc.AddRows(ctx, client.Rollouts, overloadStore, records, client.AddOptions{Flush: true})
	var refused *client.Error
	switch {
	case err == nil:
		o.status, o.delay = http.StatusCreated, res.BackpressureDelay
	case errors.As(err, &refused):
		o.status, o.delay = refused.Status, refused.BackpressureDelay
	}
	o.latency = time.Since(sent)
	if err != nil {
		o.err = err.Error()
	}
	cutOff := ctx.Err() != nil && o.status == 0
	l.in.mu.Lock()
	into := l.in.want
	if o.status != http.StatusCreated {
		into = l.in.maybe
	}
	for _, id := range ids {
		into[id] = true
	}
	l.in.mu.Unlock()
	if cutOff {
		return
	}
	l.mu.Lock()
	l.outcomes = append(l.outcomes, o)
	l.mu.Unlock()
}

// summarize fills r's counts, latencies, delays and minutes from the outcomes,
// r.Ingest's per-minute maxima (summarized already) and counts, the phase's
// pending and merged counts from its start to its end.
func (l *addLog) summarize(r *OverloadResult, counts []IngestSample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all, delays durations
	minutes := make([]struct{ latency, delay durations }, 0)
	for _, o := range l.outcomes {
		m := int(o.at / time.Minute)
		for len(r.Minutes) <= m {
			r.Minutes = append(r.Minutes, OverloadMinute{})
			minutes = append(minutes, struct{ latency, delay durations }{})
		}
		if o.status != http.StatusCreated {
			r.Failed++
			r.Minutes[m].Failed++
			r.FailedByStatus[o.status]++
			if r.FirstFailure == "" {
				r.FirstFailure = o.err
			}
			continue
		}
		r.Adds++
		r.Minutes[m].Adds++
		all = append(all, o.latency)
		minutes[m].latency = append(minutes[m].latency, o.latency)
		if o.delay > 0 {
			r.Delayed++
			r.Minutes[m].Delayed++
			delays = append(delays, o.delay)
			minutes[m].delay = append(minutes[m].delay, o.delay)
		}
	}
	r.Latency, r.Delay = all.quantiles(), delays.quantiles()
	for m := range r.Minutes {
		mm := &r.Minutes[m]
		mm.Latency, mm.Delay = minutes[m].latency.quantiles(), minutes[m].delay.quantiles()
		if m < len(r.Ingest.MinuteMax) {
			mm.PendingMax = r.Ingest.MinuteMax[m]
		}
		from, to := sampleAt(counts, time.Duration(m)*time.Minute), sampleAt(counts, time.Duration(m+1)*time.Minute)
		mm.Length = to.At - from.At
		mm.Merged = int(to.Merged - from.Merged)
		mm.Sealed = mm.Merged + to.Pending - from.Pending
	}
}
