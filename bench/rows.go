package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
)

// RowShape is the size of the rollout records a scenario writes.
type RowShape struct {
	// ContentWords is the length of content in words (about 6 bytes each); the
	// model output string is half as long.
	ContentWords int
	// Tokens is the length of output_tokens and of output_logprobs.
	Tokens int
}

// RealisticRow is a training rollout of a few KiB: about 1.2 KB of content, 0.6 KB of
// model output, and 256 output tokens with their logprobs (about 3.7 KB per row in
// Arrow).
var RealisticRow = RowShape{ContentWords: 200, Tokens: 256}

// SmallRow keeps rows cheap where only the number of objects matters.
var SmallRow = RowShape{ContentWords: 40, Tokens: 16}

var words = []string{"the", "model", "reasons", "about", "step", "by", "answer", "problem", "tokens",
	"reward", "policy", "so", "we", "check", "each", "case", "then", "sum", "result", "is"}

// rowGen makes rollout records through the worker's own decoder
// (schema.DecodeRollouts), so rows are exactly what an add request produces. Ids
// are 32 random hex digits, like UUIDs: fragments' id ranges overlap, as they do in
// production, so a commit's conflict check cannot skip fragments by their bounds.
// Everything is drawn from a seeded generator: a run is repeatable.
type rowGen struct {
	rng   *rand.Rand
	shape RowShape
	now   time.Time
	n     int
}

func newRowGen(seed uint64, shape RowShape) *rowGen {
	return &rowGen{rng: rand.New(rand.NewPCG(seed, 0x7469646d61726b)), shape: shape,
		now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
}

func (g *rowGen) id() string { return fmt.Sprintf("%016x%016x", g.rng.Uint64(), g.rng.Uint64()) }

// record returns one add request's record as JSON.
func (g *rowGen) record(id string) json.RawMessage {
	g.n++
	b := make([]byte, 0, 256+g.shape.ContentWords*10+g.shape.Tokens*16)
	b = append(b, `{"id":"`...)
	b = append(b, id...)
	b = append(b, `","rollout_id":"ro-`...)
	b = strconv.AppendInt(b, int64(g.n/16), 10)
	b = append(b, `","dataset":"gsm8k","sequence_order":`...)
	b = strconv.AppendInt(b, int64(g.n%16), 10)
	b = append(b, `,"content":"`...)
	b = g.text(b, g.shape.ContentWords)
	b = append(b, `","model_output_string":"`...)
	b = g.text(b, g.shape.ContentWords/2)
	b = append(b, `","output_tokens":[`...)
	for i := range g.shape.Tokens {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(g.rng.IntN(50000)), 10)
	}
	b = append(b, `],"output_logprobs":[`...)
	for i := range g.shape.Tokens {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, -g.rng.Float64()*4, 'f', 4, 32)
	}
	b = append(b, `],"reward":`...)
	b = strconv.AppendFloat(b, g.rng.Float64(), 'f', 3, 32)
	b = append(b, `,"policy_version":"v7","metadata":{"step":`...)
	b = strconv.AppendInt(b, int64(g.n), 10)
	b = append(b, `}}`...)
	return b
}

func (g *rowGen) text(b []byte, n int) []byte {
	for i := range n {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, words[g.rng.IntN(len(words))]...)
	}
	return b
}

// batch returns n new records as one batch of the rollout input schema, and their
// ids. The caller releases the batch.
func (g *rowGen) batch(n int) (arrow.RecordBatch, []string, error) {
	recs := make([]json.RawMessage, n)
	ids := make([]string, n)
	for i := range recs {
		ids[i] = g.id()
		recs[i] = g.record(ids[i])
	}
	rec, err := schema.DecodeRollouts(recs, g.now)
	if err != nil {
		return nil, nil, fmt.Errorf("decode generated rollouts: %w", err)
	}
	return rec, ids, nil
}

// single returns n new records, each as its own one-row batch, the way n add
// requests of one record each reach a worker. (One-row slices of a bigger batch
// would not do: the WAL accounts a slice with its whole buffers.)
func (g *rowGen) single(n int) ([]arrow.RecordBatch, error) {
	out := make([]arrow.RecordBatch, 0, n)
	for range n {
		rec, err := schema.DecodeRollouts([]json.RawMessage{g.record(g.id())}, g.now)
		if err != nil {
			for _, r := range out {
				r.Release()
			}
			return nil, fmt.Errorf("decode generated rollout: %w", err)
		}
		out = append(out, rec)
	}
	return out, nil
}
