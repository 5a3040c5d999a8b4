package schema

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// rolloutWithTokens is a typical training record: a few thousand tokens and
// logprobs, which is where decoding time goes.
func rolloutWithTokens(i, n int) json.RawMessage {
	toks, lps := make([]string, n), make([]string, n)
	for j := range toks {
		toks[j] = fmt.Sprint(j * 7 % 50000)
		lps[j] = fmt.Sprintf("-%d.%03d", j%5, j%1000)
	}
	return json.RawMessage(fmt.Sprintf(`{"id":"r%d","rollout_id":"r%d","dataset":"gsm8k","content":%q,`+
		`"output_tokens":[%s],"output_logprobs":[%s],"reward":0.5,"metadata":{"step":%d}}`,
		i, i, strings.Repeat("lorem ipsum ", 200), strings.Join(toks, ","), strings.Join(lps, ","), i))
}

func BenchmarkDecodeRollouts(b *testing.B) {
	rows := make([]json.RawMessage, 64)
	size := 0
	for i := range rows {
		rows[i] = rolloutWithTokens(i, 2048)
		size += len(rows[i])
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		rec, err := DecodeRollouts(rows, testNow)
		if err != nil {
			b.Fatal(err)
		}
		rec.Release()
	}
}

// chatRollout is a record whose text is what a chat model writes: many lines,
// quotes and non-ASCII letters, so every string literal carries escapes and is
// decoded by the slow path, not copied.
func chatRollout(i int) json.RawMessage {
	text, _ := json.Marshal(strings.Repeat("Let's think step by step.\n\tThe answer is \"4\", café.\n", 40))
	return json.RawMessage(fmt.Sprintf(`{"id":"c%d","rollout_id":"c%d","content":%s,"model_output_string":%s,`+
		`"rationale":%s,"metadata":{"step":%d,"note":"line\nbreak"}}`, i, i, text, text, text, i))
}

func BenchmarkDecodeRolloutsEscapedText(b *testing.B) {
	rows := make([]json.RawMessage, 64)
	size := 0
	for i := range rows {
		rows[i] = chatRollout(i)
		size += len(rows[i])
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		rec, err := DecodeRollouts(rows, testNow)
		if err != nil {
			b.Fatal(err)
		}
		rec.Release()
	}
}

func BenchmarkEncodeRows(b *testing.B) {
	rows := make([]json.RawMessage, 64)
	size := 0
	for i := range rows {
		rows[i] = rolloutWithTokens(i, 2048)
		size += len(rows[i])
	}
	rec, err := DecodeRollouts(rows, testNow)
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Release()
	b.SetBytes(int64(size))
	for b.Loop() {
		if _, err := EncodeRows(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCodecIsSafeForConcurrentUse(t *testing.T) {
	spec := mustSpec(t, everyTypeSpec)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				rec, err := DecodeRollouts([]json.RawMessage{rolloutWithTokens(i, 16)}, testNow)
				if err != nil {
					t.Error(err)
					return
				}
				rec.Release()
				rec, err = spec.Codec().Decode(raws(fullGenericRow))
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := EncodeRows(rec); err != nil {
					t.Error(err)
				}
				rec.Release()
			}
		}()
	}
	wg.Wait()
}
