package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/testutil/faultproxy"
)

// s3Storm is the commit storm's bucket on a real S3-compatible store: a fresh
// prefix of the bucket, opened directly (for the checks, which the faults must not
// touch) and through a fault proxy in front of the store's endpoint, which adds the
// latency and answers what is over the store's concurrency with S3's own 503
// SlowDown: the requests go through the AWS SDK (its own retries first) and
// objstore's classification, as a worker's do.
type s3Storm struct {
	raw, proxied *objstore.Bucket
	proxy        *faultproxy.Proxy
}

// openS3Storm opens rawURL (DATA_URL form, s3://bucket?endpoint=...&...; the
// credentials come from the environment, as a worker's do) at a new prefix.
func openS3Storm(ctx context.Context, rawURL string, seed uint64) (*s3Storm, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("storm on S3: %w", err)
	}
	q := u.Query()
	endpoint := q.Get("endpoint")
	if u.Scheme != "s3" || endpoint == "" {
		return nil, fmt.Errorf("storm on S3: want an s3:// URL with an endpoint= (the store the fault proxy fronts), got %s", rawURL)
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	q.Set("prefix", q.Get("prefix")+"bench-storm-"+hex.EncodeToString(id)+"/")
	u.RawQuery = q.Encode()
	raw, err := objstore.Open(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("storm on S3: %w", err)
	}
	p, err := faultproxy.Start(faultproxy.Config{Flavor: faultproxy.S3, Target: endpoint, Seed: seed})
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	q.Set("endpoint", p.URL())
	u.RawQuery = q.Encode()
	proxied, err := objstore.Open(ctx, u.String())
	if err != nil {
		_ = raw.Close()
		_ = p.Close()
		return nil, fmt.Errorf("storm on S3: %w", err)
	}
	return &s3Storm{raw: raw, proxied: proxied, proxy: p}, nil
}

// close deletes everything the run wrote under its prefix and releases the
// buckets and the proxy.
func (s *s3Storm) close(ctx context.Context) error {
	objs, err := s.raw.List(ctx, "")
	if err == nil {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(16)
		for _, o := range objs {
			g.Go(func() error { return s.raw.Delete(gctx, o.Key) })
		}
		err = g.Wait()
	}
	_ = s.proxied.Close()
	_ = s.raw.Close()
	_ = s.proxy.Close()
	if err != nil {
		return fmt.Errorf("storm on S3: remove the run's objects: %w", err)
	}
	return nil
}

// inject turns the storm's latency and throttling on at the proxy.
func (s *s3Storm) inject(cfg StormConfig) {
	s.proxy.Set(faultproxy.Faults{Latency: cfg.Latency, Jitter: cfg.Jitter, MaxInFlight: cfg.MaxConcurrent})
	s.proxy.ResetCounts()
}
