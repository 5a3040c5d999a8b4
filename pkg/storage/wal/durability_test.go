package wal_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// TestAcknowledgedRowsSurviveAnAbandonedWriter: many goroutines append, the writer
// "crashes" (its committer is stopped mid-stream without Close, the write in flight
// canceled), and a new writer replays and seals. The reference system's guarantee
// is "nothing acknowledged is lost", so every acked row must be sealed exactly once.
func TestAcknowledgedRowsSurviveAnAbandonedWriter(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		ctx := context.Background()
		b := open(t)
		w := openWriter(t, b, testShard)
		// Some rows are already sealed when the crash comes.
		mustAppend(t, w, "pre-0", "pre-1")
		mustSeal(t, w)

		const appenders, each = 16, 40
		var (
			mu    sync.Mutex
			acked = []string{"pre-0", "pre-1"}
			wg    sync.WaitGroup
		)
		crash := make(chan struct{})
		for g := range appenders {
			wg.Go(func() {
				for i := range each {
					id := fmt.Sprintf("g%02d-%03d", g, i)
					if err := appendIDs(ctx, w, id); err != nil {
						return // the crash: later appends cannot succeed
					}
					mu.Lock()
					acked = append(acked, id)
					if len(acked) == appenders*each/2 {
						close(crash)
					}
					mu.Unlock()
				}
			})
		}
		<-crash
		w.Abandon()
		wg.Wait()
		t.Logf("%d rows acknowledged before the crash", len(acked))

		w2 := openWriter(t, b, testShard)
		mustSeal(t, w2)
		checkExactlyOnce(t, sealedRows(t, b, testShard), acked)
	})
}

const (
	childURLEnv   = "TIDEMARK_WAL_CHILD_URL"
	childAppender = 8
)

func TestMain(m *testing.M) {
	if u := os.Getenv(childURLEnv); u != "" {
		os.Exit(appendAsChild(u))
	}
	os.Exit(m.Run())
}

// appendAsChild is the process the parent kills: appenders print "ack <id>" after
// each acknowledged append, and a sealer seals every few milliseconds so that the
// kill can land in the middle of a seal as well as of an append.
func appendAsChild(rawURL string) int {
	ctx := context.Background()
	b, err := objstore.Open(ctx, rawURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w, err := wal.OpenWriter(ctx, b, testDir, testShard, inputSchema)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var out sync.Mutex
	go func() {
		for {
			if _, err := w.Seal(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "seal:", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for g := range childAppender {
		go func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("c%d-%05d", g, i)
				if err := appendIDs(ctx, w, id); err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					continue
				}
				out.Lock()
				// Unbuffered: once the line is in the pipe, the parent sees it even
				// if this process dies right after.
				_, _ = os.Stdout.WriteString("ack " + id + "\n")
				out.Unlock()
			}
		}()
	}
	time.Sleep(time.Minute) // the parent kills us long before
	return 3
}

// TestAcknowledgedRowsSurviveSIGKILL kills a real appending process (file://, the
// atomic-link driver) after some acknowledgements, then reopens the shard in this
// process and seals: every row the child acknowledged must be sealed exactly once.
func TestAcknowledgedRowsSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dataURL := objstoretest.FileURL(t)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childURLEnv+"="+dataURL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	const killAfter = 300
	var acked []string
	sc := bufio.NewScanner(stdout)
	killed := false
	for sc.Scan() {
		line := sc.Text()
		id, ok := strings.CutPrefix(line, "ack ")
		if !ok {
			t.Fatalf("child printed %q", line)
		}
		acked = append(acked, id)
		if len(acked) == killAfter && !killed {
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			killed = true
		}
	}
	// Lines written before the kill are still read; a torn last line cannot occur
	// because each line is one write(2) of a few bytes.
	_ = cmd.Wait()
	if !killed {
		t.Fatalf("child exited after %d acks; stderr:\n%s", len(acked), stderr.String())
	}
	t.Logf("child acknowledged %d rows before SIGKILL", len(acked))

	b, err := objstore.Open(context.Background(), dataURL)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w := openWriter(t, b, testShard)
	mustSeal(t, w)
	checkExactlyOnce(t, sealedRows(t, b, testShard), acked)
}
