package loadgen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

// GenericSchema is the schema spec of the generic store the generator writes:
// service events with most column types a generic store has.
// Every "nullable" is spelled out: a create request reads a missing one as true.
const GenericSchema = `{"columns":[` +
	`["id",{"type":"string"}],` +
	`["ts",{"type":"timestamp","nullable":false}],` +
	`["service",{"type":"string","nullable":false}],` +
	`["event",{"type":"string","nullable":false}],` +
	`["user_id",{"type":"int64","nullable":false}],` +
	`["latency_ms",{"type":"float64","nullable":true}],` +
	`["ok",{"type":"bool","nullable":false}],` +
	`["tags",{"type":"list","item":{"type":"string","nullable":false},"nullable":false}],` +
	`["embedding",{"type":"vector","dim":8,"nullable":false}]` +
	`]}`

// turnsPerRollout is how many records (turns) one rollout has.
const turnsPerRollout = 6

var (
	datasets = []string{"gsm8k", "math", "humaneval", "mbpp"}
	problems = []string{
		"Natalia sold clips to %d of her friends in April, and then she sold half as many clips in May. How many clips did she sell altogether?",
		"A train travels %d km in 2 hours. At the same speed, how far does it travel in 5 hours?",
		"Write a function that returns the %d-th Fibonacci number.",
		"Find the remainder when 7^%d is divided by 13.",
		"Given a list of %d integers, return the length of the longest increasing subsequence.",
	}
	services = []string{"api", "ingest", "trainer", "grader", "sampler"}
	events   = []string{"request", "retry", "cache_miss", "checkpoint", "eval"}
	tagSet   = []string{"prod", "canary", "gpu", "cpu", "eu", "us", "batch", "online"}
)

// rng returns a generator seeded by the row's position, so a row's content is
// the same every time it is generated.
func rng(n int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(n), 0x7469_6465_6d61_726b)) }

// RolloutRecord is the n-th rollout record of a run, as the JSON of an add
// request: turn n%6 of rollout n/6 (a system prompt, the problem, then the
// model's answers with tokens, logprobs, a loss mask, a grade and the policy
// version that produced it).
func RolloutRecord(runID string, n int64, now time.Time) json.RawMessage {
	r := rng(n)
	rollout := n / turnsPerRollout
	turn := int(n % turnsPerRollout)
	p := rng(rollout) // shared by every turn of the rollout
	problem := fmt.Sprintf(problems[p.IntN(len(problems))], 3+p.IntN(90))
	rec := map[string]any{
		"id":             fmt.Sprintf("%s-%d", runID, n),
		"rollout_id":     fmt.Sprintf("%s-r%d", runID, rollout),
		"problem_id":     fmt.Sprintf("%s-%d", datasets[p.IntN(len(datasets))], p.IntN(5000)),
		"dataset":        datasets[p.IntN(len(datasets))],
		"sequence_order": turn,
		"created_at":     now.UnixMicro(),
		"policy_version": fmt.Sprintf("policy-v%d", 1+rollout%5),
		"metadata":       map[string]any{"temperature": 0.8, "top_p": 0.95, "sampler": "vllm", "seed": r.IntN(1 << 20)},
	}
	switch turn {
	case 0:
		rec["role"] = "system"
		rec["content"] = "You are a careful assistant. Think step by step and put the final answer last."
	case 1:
		rec["role"] = "user"
		rec["content"] = problem
		rec["problem_text"] = problem
	default:
		inTok, outTok := 40+r.IntN(200), 16+r.IntN(120)
		tokens, logprobs, mask := make([]int32, outTok), make([]float32, outTok), make([]int8, outTok)
		for i := range tokens {
			tokens[i] = int32(r.IntN(50000))
			logprobs[i] = -r.Float32() * 4
			mask[i] = 1
		}
		reward := float32(r.IntN(2))
		rec["role"] = "assistant"
		rec["content"] = fmt.Sprintf("Step %d: we compute the intermediate value %d, so the answer is %d.", turn-1, r.IntN(1000), r.IntN(1000))
		rec["model_input_string"] = problem
		rec["model_output_string"] = rec["content"]
		rec["output_tokens"] = tokens
		rec["output_logprobs"] = logprobs
		rec["loss_mask"] = mask
		rec["num_input_tokens"] = inTok
		rec["num_output_tokens"] = outTok
		rec["reward"] = reward
		rec["raw_reward"] = reward
		rec["advantage"] = reward - 0.5
		rec["score"] = r.Float32()
		rec["grader_id"] = "exact-match-v2"
		rec["include_in_training"] = turn == turnsPerRollout-1
		rec["relationships"] = []map[string]any{
			{"target_id": fmt.Sprintf("%s-%d", runID, n-1), "relation": "responds_to", "weight": 1.0},
		}
	}
	data, err := json.Marshal(rec)
	if err != nil {
		panic(fmt.Sprintf("loadgen: encode rollout record: %v", err)) // only plain values
	}
	return data
}

// GenericRow is the n-th generic row of a run (GenericSchema), as JSON.
func GenericRow(runID string, n int64, now time.Time) json.RawMessage {
	r := rng(n)
	tags := []string{tagSet[r.IntN(len(tagSet))], tagSet[r.IntN(len(tagSet))]}
	emb := make([]float32, 8)
	for i := range emb {
		emb[i] = r.Float32()*2 - 1
	}
	row := map[string]any{
		"id":        fmt.Sprintf("%s-%d", runID, n),
		"ts":        now.UTC().Format(time.RFC3339Nano),
		"service":   services[r.IntN(len(services))],
		"event":     events[r.IntN(len(events))],
		"user_id":   r.Int64N(1_000_000),
		"ok":        r.IntN(20) != 0,
		"tags":      tags,
		"embedding": emb,
	}
	if r.IntN(4) != 0 {
		row["latency_ms"] = 1 + r.Float64()*250
	} else {
		row["latency_ms"] = nil
	}
	data, err := json.Marshal(row)
	if err != nil {
		panic(fmt.Sprintf("loadgen: encode generic row: %v", err))
	}
	return data
}
