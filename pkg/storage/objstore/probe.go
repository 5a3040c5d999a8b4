package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// ErrNoConditionalWrites means the bucket ignores the precondition of a
// put-if-absent: it replaced an object that existed instead of refusing the
// write. It is Invalid: the bucket (or whatever stands between Tidemark and it)
// must change; retrying cannot help.
var ErrNoConditionalWrites = errclass.New(errclass.Invalid, "the bucket does not support conditional writes (put-if-absent)")

// ProbePrefix is where CheckConditionalWrites writes its probe objects: outside
// the registry (_registry/) and every store's directory (rollout/, generic/). The
// probe deletes what it wrote.
const ProbePrefix = "_tidemark/probe/"

// whatToDo is the advice ErrNoConditionalWrites comes with.
const whatToDo = "Tidemark's commits, seals, claims and fences need it: " +
	"on AWS S3 every bucket supports it (since August 2024), so check that nothing between (a proxy, a gateway, " +
	"an S3-compatible store behind an s3:// URL) drops the If-None-Match header; on MinIO, run a release from " +
	"August 2024 or later; another S3-compatible store must answer a PUT with If-None-Match: * of an existing key " +
	"with 412 Precondition Failed; GCS (ifGenerationMatch=0) and Azure Blob (If-None-Match: *) always support it, " +
	"so an emulator or proxy in front of the bucket is ignoring the precondition"

// CheckConditionalWrites proves that b's put-if-absent is conditional before
// anything relies on it: it creates a probe object under ProbePrefix, then
// writes the same key again with put-if-absent, which must fail with ErrExists
// and leave the first bytes in place; it deletes the probe either way. A bucket
// that accepts the second write (or answers "exists" but replaced the bytes)
// fails with an error wrapping ErrNoConditionalWrites that says what to do; a
// bucket that cannot be written, read or deleted from fails with that error.
//
// The probe key is random, so a first write answered "exists" can only be this
// probe's own write whose answer was lost and whose resend the store refused:
// the precondition held.
func CheckConditionalWrites(ctx context.Context, b *Bucket) (err error) {
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	key := ProbePrefix + hex.EncodeToString(id)
	first := []byte("tidemark conditional-write probe 1 " + hex.EncodeToString(id))
	if err := b.PutIfAbsent(ctx, key, first); err != nil && !errors.Is(err, ErrExists) {
		return fmt.Errorf("conditional-write probe of bucket %s: %w", b, err)
	}
	defer func() {
		if derr := b.Delete(context.WithoutCancel(ctx), key); derr != nil && err == nil {
			err = fmt.Errorf("conditional-write probe of bucket %s: remove the probe object: %w", b, derr)
		}
	}()
	err = b.PutIfAbsent(ctx, key, []byte("tidemark conditional-write probe 2"))
	switch {
	case err == nil:
		return fmt.Errorf("bucket %s: a second put-if-absent of %s replaced the object instead of failing: %w; %s",
			b, key, ErrNoConditionalWrites, whatToDo)
	case !errors.Is(err, ErrExists):
		return fmt.Errorf("conditional-write probe of bucket %s: %w", b, err)
	}
	got, err := b.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("conditional-write probe of bucket %s: %w", b, err)
	}
	if !bytes.Equal(got, first) {
		return fmt.Errorf("bucket %s: a second put-if-absent of %s was answered \"exists\" but replaced the object: %w; %s",
			b, key, ErrNoConditionalWrites, whatToDo)
	}
	return nil
}
