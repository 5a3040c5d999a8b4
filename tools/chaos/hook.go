//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// pollInterval is how often the faults file is read: short enough that a campaign
// turning faults off sees the process obey within a second.
const pollInterval = 250 * time.Millisecond

// WrapBucket, in a chaos build with TIDEMARK_CHAOS_FAULTS_FILE set, returns b
// wrapped with objstore.WithFaults under the control of that file (see the package
// doc); the file is polled for the life of the process. Without the variable it
// returns b untouched. A file that exists but does not parse at start is an error,
// so a campaign with a broken spec fails loudly instead of running without faults.
func WrapBucket(b *objstore.Bucket, log *slog.Logger) (*objstore.Bucket, error) {
	path := os.Getenv(FaultsFileEnv)
	if path == "" {
		return b, nil
	}
	w := &watcher{
		path: path,
		// Each process draws its own faults: a fixed seed would make every worker
		// of a campaign fail the same sequence of requests.
		f:   objstore.NewFaults(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid()))),
		log: log.With("faults_file", path),
	}
	if err := w.poll(); err != nil {
		return nil, fmt.Errorf("chaos faults file (%s) %s: %w", FaultsFileEnv, path, err)
	}
	log.Warn("chaos build: object-store fault hook active; requests may be failed, delayed, throttled or hung on purpose",
		"bucket", b.String(), "faults_file", path, "stats_file", path+StatsSuffix)
	go w.run(context.Background())
	return objstore.WithFaults(b, w.f), nil
}

// watcher applies the faults file to f whenever its content changes.
type watcher struct {
	path string
	f    *objstore.Faults
	log  *slog.Logger

	last []byte // content in force; nil: none read yet
	spec Spec
}

// run polls until ctx ends (never, in a process: the hook lives as long as it).
func (w *watcher) run(ctx context.Context) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.poll(); err != nil {
			w.log.Error("chaos: faults file unreadable; the faults in force are kept", "err", err)
		}
	}
}

// poll reads the file, applies it if it changed, and writes the counters.
func (w *watcher) poll() error {
	data, err := os.ReadFile(w.path)
	if os.IsNotExist(err) {
		data, err = nil, nil // no file: no faults
	}
	if err != nil {
		return err
	}
	if w.last == nil || !bytes.Equal(data, w.last) {
		spec, err := ParseSpec(data)
		if err != nil {
			w.last = data // log a broken file once, not every poll
			return err
		}
		spec.Apply(w.f)
		w.last, w.spec = append([]byte{}, data...), spec
		w.log.Warn("chaos: object-store faults changed",
			"error_rate", spec.ErrorRate, "error_ops", spec.ErrorOps, "write_phase", spec.WritePhase,
			"latency", time.Duration(spec.Latency), "jitter", time.Duration(spec.Jitter),
			"max_concurrent", spec.MaxConcurrent, "throttle", spec.Throttle, "rules", len(spec.Rules))
	}
	return w.writeStats()
}

// writeStats replaces the stats file atomically (write a temp file, rename), so a
// test never reads half of it.
func (w *watcher) writeStats() error {
	data, err := json.Marshal(StatsOf(w.f, w.spec, time.Now()))
	if err != nil {
		return err
	}
	dst := w.path + StatsSuffix
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".tmp-*")
	if err != nil {
		return fmt.Errorf("stats file %s: %w", dst, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("stats file %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("stats file %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("stats file %s: %w", dst, err)
	}
	return nil
}
