package dashboard

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// ConsumerCursors lists a store's named consumers and their committed cursors
// (consumers.Cursors).
type ConsumerCursors interface {
	List(ctx context.Context, target registry.Target, limit int) ([]consumers.Record, bool, error)
}

// Horizons answers a store's change-feed horizon, and whether one is known yet
// (horizon.View, which the master keeps following).
type Horizons interface {
	Horizon(ctx context.Context, target registry.Target) (h uint64, ok bool, err error)
}

// consumersShown bounds the consumers one store page lists; consumersTimeout
// bounds their reads, so a page with etcd away still renders (saying so).
const (
	consumersShown   = 100
	consumersTimeout = 3 * time.Second
)

// consumerView is one named consumer on a store page.
type consumerView struct {
	Name        string
	Cursor      string
	CommittedAt time.Time
	// LagSeconds is how far the committed cursor is behind the store's horizon
	// (consumers.Record.Lag); LagKnown is false without a horizon, or for a
	// consumer that committed no position yet.
	LagSeconds float64
	LagKnown   bool
}

// consumersPanel is the store page's consumers card.
type consumersPanel struct {
	// Off: the dashboard was built without the consumers' cursors or the
	// horizons (Config.Consumers, Config.Horizons), and shows none.
	Off       bool
	Consumers []consumerView
	More      bool
	// NoHorizon: no shard of the store has published a horizon yet, so no lag
	// is measured.
	NoHorizon bool
	Error     string
}

// consumers reads target's named consumers and measures each one's lag behind
// the store's horizon. A failure is shown on the card, never fails the page.
func (d *Dashboard) consumers(ctx context.Context, target registry.Target) consumersPanel {
	if d.cfg.Consumers == nil || d.cfg.Horizons == nil {
		return consumersPanel{Off: true}
	}
	ctx, cancel := context.WithTimeout(ctx, consumersTimeout)
	defer cancel()
	var p consumersPanel
	recs, more, err := d.cfg.Consumers.List(ctx, target, consumersShown)
	if err != nil {
		p.Error = fmt.Sprintf("consumers not read: %v", err)
		return p
	}
	p.More = more
	if len(recs) == 0 {
		return p
	}
	h, ok, err := d.cfg.Horizons.Horizon(ctx, target)
	switch {
	case err != nil:
		p.Error = fmt.Sprintf("horizon not read, lags unknown: %v", err)
	case !ok:
		p.NoHorizon = true
	}
	for _, r := range recs {
		v := consumerView{Name: r.Consumer, Cursor: r.Cursor.Cursor(), CommittedAt: r.CommittedAt}
		if ok {
			var lag time.Duration
			lag, v.LagKnown = r.Lag(h)
			v.LagSeconds = lag.Seconds()
		}
		p.Consumers = append(p.Consumers, v)
	}
	return p
}
