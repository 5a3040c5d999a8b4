package objstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

const (
	raceWriters = 8
	raceKeys    = 200
)

// racePayload is what writer w stores under key k: distinct per writer, so the stored
// bytes tell who won.
func racePayload(w string, k int) []byte {
	return []byte(fmt.Sprintf("writer %s wrote key %d; %s", w, k, strings.Repeat(w, 64)))
}

func raceKey(k int) string { return fmt.Sprintf("race/_versions/%08d.json", k) }

// TestPutIfAbsentHasExactlyOneWinnerPerKey guards the base-table commit: manifest v+1
// is written with put-if-absent, and two merges that both "win" would each believe
// their commit landed. gocloud's fileblob IfNotExist let 262 of 8x200 racing writes
// win; on azureblob a losing conditional write through the pipe writer panicked.
func TestPutIfAbsentHasExactlyOneWinnerPerKey(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		var (
			start sync.WaitGroup
			done  sync.WaitGroup
			mu    sync.Mutex
			wins  = make(map[int][]string)
		)
		start.Add(1)
		for w := range raceWriters {
			name := string(rune('a' + w))
			done.Go(func() {
				start.Wait()
				for k := range raceKeys {
					err := b.PutIfAbsent(ctx, raceKey(k), racePayload(name, k))
					switch {
					case err == nil:
						mu.Lock()
						wins[k] = append(wins[k], name)
						mu.Unlock()
					case !errors.Is(err, objstore.ErrExists):
						t.Errorf("writer %s key %d: %v (want nil or ErrExists)", name, k, err)
					}
				}
			})
		}
		start.Done()
		done.Wait()
		checkOneWinnerPerKey(t, b, wins)
	})
}

func checkOneWinnerPerKey(t *testing.T, b *objstore.Bucket, wins map[int][]string) {
	t.Helper()
	for k := range raceKeys {
		if len(wins[k]) != 1 {
			t.Errorf("key %d: %d winners %q, want exactly 1", k, len(wins[k]), wins[k])
			continue
		}
		got, err := b.Get(context.Background(), raceKey(k))
		if err != nil {
			t.Errorf("key %d: %v", k, err)
			continue
		}
		if want := racePayload(wins[k][0], k); !bytes.Equal(got, want) {
			t.Errorf("key %d: stored %q, want the winner's %q", k, got, want)
		}
	}
}

// childEnv switches the test binary into a put-if-absent racer (see TestMain).
const childEnv = "TIDEMARK_OBJSTORE_RACE_CHILD"

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(raceAsChild(name, os.Getenv("TIDEMARK_OBJSTORE_RACE_URL")))
	}
	os.Exit(m.Run())
}

// raceAsChild is one racing process: it says "ready", waits for "go" on stdin so that
// every child starts at once, then tries every key and prints "won <k>" for each win.
func raceAsChild(name, rawURL string) int {
	ctx := context.Background()
	b, err := objstore.Open(ctx, rawURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer b.Close()
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		fmt.Fprintf(os.Stderr, "child %s: waiting for go: %q %v\n", name, line, err)
		return 2
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for k := range raceKeys {
		err := b.PutIfAbsent(ctx, raceKey(k), racePayload(name, k))
		switch {
		case err == nil:
			fmt.Fprintf(out, "won %d\n", k)
		case !errors.Is(err, objstore.ErrExists):
			fmt.Fprintf(os.Stderr, "child %s key %d: %v\n", name, k, err)
			return 1
		}
	}
	return 0
}

// TestPutIfAbsentAcrossProcesses is the case an in-process lock cannot fix: several
// worker processes sharing one store commit to the same keys. Each child opens the
// production-form URL (azblob://, s3://, gs://) with the environment a worker reads
// its credentials and endpoint from, so this also proves those URLs open.
func TestPutIfAbsentAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, c := range []struct {
		name string
		url  func(testing.TB) (dataURL string, env []string)
	}{
		{"file", func(t testing.TB) (string, []string) { return objstoretest.FileURL(t), nil }},
		{"azurite", objstoretest.AzuriteURL},
		{"minio", objstoretest.MinIOURL},
		{"gcs", objstoretest.GCSURL},
	} {
		t.Run(c.name, func(t *testing.T) {
			dataURL, env := c.url(t)
			t.Parallel()
			raceAcrossProcesses(t, dataURL, env)
		})
	}
}

// raceAcrossProcesses starts racing children on dataURL, each with env added to its
// environment, and checks that each key has exactly one winner.
func raceAcrossProcesses(t *testing.T, dataURL string, env []string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const children = 4
	type child struct {
		name   string
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout *bufio.Reader
		stderr bytes.Buffer
	}
	var cs []*child
	for i := range children {
		c := &child{name: string(rune('p' + i))}
		c.cmd = exec.Command(exe, "-test.run=^$")
		c.cmd.Env = append(os.Environ(), childEnv+"="+c.name, "TIDEMARK_OBJSTORE_RACE_URL="+dataURL)
		c.cmd.Env = append(c.cmd.Env, env...)
		c.cmd.Stderr = &c.stderr
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		c.stdout = bufio.NewReader(out)
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
		cs = append(cs, c)
	}
	for _, c := range cs {
		if line, err := c.stdout.ReadString('\n'); line != "ready\n" {
			t.Fatalf("child %s: %q %v; stderr: %s", c.name, line, err, c.stderr.String())
		}
	}
	for _, c := range cs {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	wins := make(map[int][]string)
	for _, c := range cs {
		n := 0
		for {
			line, err := c.stdout.ReadString('\n')
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			var k int
			if _, err := fmt.Sscanf(line, "won %d\n", &k); err != nil {
				t.Fatalf("child %s printed %q", c.name, line)
			}
			wins[k] = append(wins[k], c.name)
			n++
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %s: %v; stderr: %s", c.name, err, c.stderr.String())
		}
		t.Logf("child %s won %d keys", c.name, n)
	}
	checkOneWinnerPerKey(t, objstoretest.OpenURL(t, dataURL), wins)
}

// TestReadersNeverSeeAPartialObject: a reader polling a key while writers replace or
// create it must see a whole payload or nothing. A torn read of a WAL entry or a
// manifest would be decoded as garbage (or worse, as a shorter valid prefix).
func TestReadersNeverSeeAPartialObject(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		const (
			size     = 256 << 10
			versions = 12
		)
		payloads := make([][]byte, versions)
		for v := range payloads {
			payloads[v] = bytes.Repeat([]byte{byte('A' + v)}, size)
		}
		payload := func(v int) []byte { return payloads[v] }
		check := func(key string, data []byte) {
			if len(data) == 0 {
				t.Errorf("%s: read an empty object", key)
				return
			}
			v := int(data[0] - 'A')
			if v < 0 || v >= versions || !bytes.Equal(data, payloads[v]) {
				t.Errorf("%s: read %d bytes that are not one whole payload", key, len(data))
			}
		}

		done := make(chan struct{})
		var readers sync.WaitGroup
		for range 2 {
			readers.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					for _, key := range []string{"torn/replaced", "torn/created"} {
						data, err := b.Get(ctx, key)
						if errors.Is(err, objstore.ErrNotFound) {
							continue
						}
						if err != nil {
							t.Errorf("get %s: %v", key, err)
							return
						}
						check(key, data)
					}
				}
			})
		}
		for v := range versions {
			if err := b.Put(ctx, "torn/replaced", payload(v)); err != nil {
				t.Fatal(err)
			}
			_ = b.Delete(ctx, "torn/created")
			if err := b.PutIfAbsent(ctx, "torn/created", payload(v)); err != nil {
				t.Fatal(err)
			}
		}
		close(done)
		readers.Wait()
	})
}
