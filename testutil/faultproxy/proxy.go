package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config says which store the proxy fronts.
type Config struct {
	// Flavor is the store's API.
	Flavor Flavor
	// Target is the store's endpoint: "http://127.0.0.1:9100", or host:port.
	Target string
	// Seed seeds the draws that pick each request's fault.
	Seed uint64
	// S3SecretKey is the secret of the key that signs the clients' requests. Only
	// StripConditional on S3 needs it (the precondition header is signed).
	S3SecretKey string
	// Addr is where the proxy listens; empty means a free loopback port.
	Addr string
}

// Faults is what the proxy does to the requests it receives. The zero value
// forwards everything untouched.
type Faults struct {
	// Throttle, DropBefore and DropAfter are the fractions of requests (among
	// those Only selects) answered with the store's throttle response, dropped
	// before forwarding, and dropped after the store answered. Their sum is at
	// most 1; what is left is forwarded.
	Throttle, DropBefore, DropAfter float64
	// Only, if set, limits the fractions above to the requests it returns true
	// for (e.g. IsWrite, Flavor.IsConditionalWrite, FirstN); the others are
	// forwarded. It is called once per request, with the proxy's lock held.
	Only func(*http.Request) bool
	// MaxInFlight, if positive, is how many requests the store serves at once:
	// one arriving while that many are being forwarded gets the throttle answer,
	// as a saturated store refuses what it cannot serve.
	MaxInFlight int
	// Latency (+ up to Jitter, drawn per request) is added before a request is
	// forwarded, while it holds its MaxInFlight slot.
	Latency, Jitter time.Duration
	// DropFirstAttemptOnly limits the drops to a request's first attempt, as the
	// SDK numbers them (see Attempt): the SDK's resend after a dropped connection
	// is then always forwarded (it may still be throttled). Without it three
	// drops in a row exhaust the S3 SDK's attempts, and the request fails.
	DropFirstAttemptOnly bool
	// StripConditional removes the precondition of conditional writes (S3's
	// If-None-Match, GCS's ifGenerationMatch) before forwarding them: the store
	// then overwrites whatever is there, as one without conditional writes does.
	StripConditional bool
}

// Counts is what the proxy did, since it started or since ResetCounts.
type Counts struct {
	// Requests is every request received: Forwarded + Throttled + DroppedBefore +
	// DroppedAfter + Failed.
	Requests int64
	// Forwarded requests were answered by the store, and the answer passed on.
	Forwarded int64
	// Throttled requests got the store's throttle answer without being forwarded
	// (a Throttle draw, or over MaxInFlight).
	Throttled int64
	// DroppedBefore requests had their connection closed without being forwarded;
	// DroppedAfter requests were performed by the store, and then their
	// connection was closed without an answer.
	DroppedBefore, DroppedAfter int64
	// Failed requests could not be forwarded (the store did not answer): 502.
	Failed int64
	// ConditionalWrites is how many requests carried a put-if-absent
	// precondition, and Stripped how many of them were forwarded without it.
	ConditionalWrites, Stripped int64
	// PeakInFlight is the most requests forwarded at once.
	PeakInFlight int
}

// Proxy is a running fault proxy. Its methods are safe for concurrent use.
type Proxy struct {
	cfg    Config
	target *url.URL
	ln     net.Listener
	srv    *http.Server
	rp     *httputil.ReverseProxy
	tr     *http.Transport

	mu       sync.Mutex
	faults   Faults
	rng      *rand.Rand
	counts   Counts
	inFlight int
}

type fate int

const (
	forward fate = iota
	throttle
	dropBefore
	dropAfter
)

// errDropAfter is how a response the store gave is turned into a dropped
// connection: ModifyResponse fails with it and the error handler hijacks.
var errDropAfter = errors.New("faultproxy: drop the connection after the store answered")

// requestState travels with a forwarded request to the outbound hooks.
type requestState struct {
	dropAfter bool
	strip     bool
}

type stateKey struct{}

// Start listens and serves until Close.
func Start(cfg Config) (*Proxy, error) {
	if cfg.Flavor != S3 && cfg.Flavor != GCS {
		return nil, fmt.Errorf("faultproxy: unknown flavor %v", cfg.Flavor)
	}
	raw := cfg.Target
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	target, err := url.Parse(raw)
	if err != nil || target.Host == "" {
		return nil, fmt.Errorf("faultproxy: target %q: want http://host:port or host:port (%v)", cfg.Target, err)
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256 // benchmarks send hundreds of requests at once
	p := &Proxy{cfg: cfg, target: target, ln: ln, tr: tr, rng: rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      roundTripper(p.roundTrip),
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		ErrorLog:       log.New(io.Discard, "", 0),
	}
	p.srv = &http.Server{Handler: p, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: time.Minute}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Addr is the proxy's host:port, the endpoint clients use instead of the store's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is http://Addr().
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Set replaces the faults; requests already in flight keep the fate they drew.
func (p *Proxy) Set(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// Counts returns the counters.
func (p *Proxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// ResetCounts zeroes the counters (requests in flight are counted when they end).
func (p *Proxy) ResetCounts() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts = Counts{PeakInFlight: p.inFlight}
}

// Close stops the proxy and closes its connections, to clients and to the store.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.tr.CloseIdleConnections()
	return err
}

// ServeHTTP draws the request's fate and carries it out.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, st, delay, release := p.decide(r)
	defer release()
	switch f {
	case throttle:
		p.cfg.Flavor.writeThrottle(w, r)
		p.count(func(c *Counts) { c.Throttled++ })
		return
	case dropBefore:
		hangUp(w)
		p.count(func(c *Counts) { c.DroppedBefore++ })
		return
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			p.count(func(c *Counts) { c.Failed++ })
			return
		}
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
}

// decide draws r's fate under the current faults and takes its in-flight slot;
// release gives the slot back.
func (p *Proxy) decide(r *http.Request) (f fate, st *requestState, delay time.Duration, release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fs := p.faults
	p.counts.Requests++
	st = &requestState{}
	if p.cfg.Flavor.IsConditionalWrite(r) {
		p.counts.ConditionalWrites++
		st.strip = fs.StripConditional
	}
	release = func() {}
	if fs.Only == nil || fs.Only(r) {
		mayDrop := !fs.DropFirstAttemptOnly || Attempt(r) <= 1
		switch x := p.rng.Float64(); {
		case x < fs.Throttle:
			return throttle, st, 0, release
		case x < fs.Throttle+fs.DropBefore && mayDrop:
			return dropBefore, st, 0, release
		case x >= fs.Throttle+fs.DropBefore && x < fs.Throttle+fs.DropBefore+fs.DropAfter && mayDrop:
			st.dropAfter = true
		}
	}
	if fs.MaxInFlight > 0 && p.inFlight >= fs.MaxInFlight {
		return throttle, st, 0, release
	}
	p.inFlight++
	p.counts.PeakInFlight = max(p.counts.PeakInFlight, p.inFlight)
	release = func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}
	delay = fs.Latency
	if fs.Jitter > 0 {
		delay += time.Duration(p.rng.Int64N(int64(fs.Jitter) + 1))
	}
	return forward, st, delay, release
}

func (p *Proxy) count(fn func(*Counts)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(&p.counts)
}

// rewrite aims the outbound request at the store. On S3 the Host header stays
// the client's, which its signature covers; on GCS it becomes the store's, which
// fake-gcs-server routes its XML API by (-public-host).
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.target)
	if p.cfg.Flavor == S3 {
		pr.Out.Host = pr.In.Host
	}
}

// roundTrip sends the outbound request, as the reverse proxy left it (so a new
// signature covers exactly the headers the store receives), without its
// precondition if it is to be stripped. A precondition that cannot be stripped
// fails the request (502) rather than reach the store: the test would otherwise
// not get the store it asked for.
func (p *Proxy) roundTrip(r *http.Request) (*http.Response, error) {
	if st, _ := r.Context().Value(stateKey{}).(*requestState); st != nil && st.strip {
		if err := p.cfg.Flavor.strip(r, p.cfg.S3SecretKey); err != nil {
			return nil, err
		}
		p.count(func(c *Counts) { c.Stripped++ })
	}
	return p.tr.RoundTrip(r)
}

func (p *Proxy) modifyResponse(res *http.Response) error {
	if st, _ := res.Request.Context().Value(stateKey{}).(*requestState); st != nil && st.dropAfter {
		return errDropAfter
	}
	p.count(func(c *Counts) { c.Forwarded++ })
	return nil
}

func (p *Proxy) errorHandler(w http.ResponseWriter, _ *http.Request, err error) {
	if errors.Is(err, errDropAfter) {
		hangUp(w)
		p.count(func(c *Counts) { c.DroppedAfter++ })
		return
	}
	p.count(func(c *Counts) { c.Failed++ })
	http.Error(w, err.Error(), http.StatusBadGateway)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// hangUp closes the client's connection without an answer, with a TCP reset (no
// lingering), as a connection that dies under a request does.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		w.WriteHeader(http.StatusBadGateway) // cannot happen over HTTP/1.1
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// Attempt is the attempt number the client's SDK gave r: the AWS SDK's
// amz-sdk-request header ("attempt=2; max=3"), the Google client's
// x-goog-api-client ("gccl-attempt-count/2"); 0 when r carries none (the Google
// client's uploads do not).
func Attempt(r *http.Request) int {
	for _, h := range []struct{ header, key, sep string }{
		{"Amz-Sdk-Request", "attempt=", ";"},
		{"X-Goog-Api-Client", "gccl-attempt-count/", " "},
	} {
		if _, rest, ok := strings.Cut(r.Header.Get(h.header), h.key); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, h.sep, 2)[0]))
			return n
		}
	}
	return 0
}

// FirstN returns a predicate for Faults.Only that holds for the first n requests
// match holds for (nil matches every request), and never again: to lose exactly
// one answer of a protocol, say, and let the SDK's resend through.
func FirstN(n int, match func(*http.Request) bool) func(*http.Request) bool {
	var mu sync.Mutex
	return func(r *http.Request) bool {
		if match != nil && !match(r) {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if n <= 0 {
			return false
		}
		n--
		return true
	}
}
