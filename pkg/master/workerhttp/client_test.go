package workerhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// worker serves h as worker name and counts the requests it got.
func worker(t *testing.T, name string, h http.HandlerFunc) (fanout.Worker, *atomic.Int32) {
	t.Helper()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return fanout.Worker{InstanceID: name, HTTPAddr: strings.TrimPrefix(srv.URL, "http://")}, &asked
}

// deadWorker is a worker whose address nothing listens on.
func deadWorker(t *testing.T, name string) fanout.Worker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return fanout.Worker{InstanceID: name, HTTPAddr: addr}
}

func records(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer worker-token" {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"code":"UNAUTHENTICATED","message":"no token"}}`)
		return
	}
	fmt.Fprint(w, `{"records":[{"id":"r1"}]}`)
}

// A worker that cannot be reached, or that does not answer within the timeout,
// is passed over for the next in instance order; one without an HTTP address
// is not asked. The dashboard's reads asked the first worker only, and showed
// its failure while the others could have answered.
func TestGetPassesOverUnreachableAndHungWorkersWithTheCredential(t *testing.T) {
	hung, hungAsked := worker(t, "w1", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	good, goodAsked := worker(t, "w2", records)
	c := New(Config{Token: "worker-token", Timeout: 300 * time.Millisecond, Discovery: fanout.StaticDiscovery{
		good, hung, deadWorker(t, "w0"), {InstanceID: "a-grpc-only", GRPCAddr: "127.0.0.1:1"}}})
	got, name, err := c.Rows(context.Background(), registry.KindRollout, "r", client.ListOptions{})
	if err != nil || name != "w2" || len(got.Rows) != 1 || string(got.Rows[0]) != `{"id":"r1"}` {
		t.Fatalf("Rows = %q, %+v, %v; want r1 from w2", name, got, err)
	}
	if hungAsked.Load() != 1 || goodAsked.Load() != 1 {
		t.Errorf("asked the hung worker %d times and the good one %d, want once each", hungAsked.Load(), goodAsked.Load())
	}

	none := New(Config{Timeout: 300 * time.Millisecond, Discovery: fanout.StaticDiscovery{deadWorker(t, "w0")}})
	if _, _, err := none.Rows(context.Background(), registry.KindRollout, "r", client.ListOptions{}); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "worker w0") {
		t.Errorf("with every worker unreachable: %v, want ErrUnreachable naming w0", err)
	}
	if _, _, err := New(Config{Discovery: fanout.StaticDiscovery{}}).Rows(context.Background(), registry.KindRollout, "r", client.ListOptions{}); !errors.Is(err, ErrNoWorker) {
		t.Errorf("with no worker: %v, want ErrNoWorker", err)
	}
}

// A worker that answered is not asked again, nor is the next one: its error
// answer is the read's, with its status, code and message and its name; an
// answer over MaxAnswer is refused, not cut short and decoded.
func TestAnAnswerIsTheReadsWhateverItSays(t *testing.T) {
	missing, _ := worker(t, "w0", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"code":"NOT_FOUND","message":"store r not found"}}`)
	})
	big, _ := worker(t, "w0", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"records":[{"id":%q}]}`, strings.Repeat("x", 100))
	})
	garbled, _ := worker(t, "w0", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"records":`) })
	next, nextAsked := worker(t, "w1", records)

	rows := func(c *Client) error {
		_, _, err := c.Rows(context.Background(), registry.KindRollout, "r", client.ListOptions{})
		return err
	}
	err := rows(New(Config{Discovery: fanout.StaticDiscovery{missing, next}}))
	var answered *AnswerError
	if !errors.As(err, &answered) || answered.Status != http.StatusNotFound || answered.Code != "NOT_FOUND" ||
		err.Error() != "worker w0 answered 404 Not Found: store r not found" {
		t.Errorf("a 404: %v, want an AnswerError naming w0, 404, NOT_FOUND and the message", err)
	}
	if err := rows(New(Config{MaxAnswer: 64, Discovery: fanout.StaticDiscovery{big, next}})); !errors.Is(err, ErrTooLarge) {
		t.Errorf("an answer over MaxAnswer: %v, want ErrTooLarge", err)
	}
	if err := rows(New(Config{Discovery: fanout.StaticDiscovery{garbled, next}})); !errors.Is(err, ErrUndecodable) {
		t.Errorf("an answer cut short: %v, want ErrUndecodable", err)
	}
	if n := nextAsked.Load(); n != 0 {
		t.Errorf("the next worker was asked %d times after the first answered", n)
	}
}

// OpenBlob hands the answer's body over unread (a blob is streamed, not held), with
// the same failover before an answer.
func TestOpenStreamsTheAnswerOfTheFirstWorkerThatAnswers(t *testing.T) {
	blob, _ := worker(t, "w1", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("b", 1<<20))
	})
	c := New(Config{MaxAnswer: 64, Discovery: fanout.StaticDiscovery{deadWorker(t, "w0"), blob}})
	body, _, name, err := c.OpenBlob(context.Background(), "r", "x")
	if err != nil || name != "w1" {
		t.Fatalf("OpenBlob = %q, %v", name, err)
	}
	n, err := io.Copy(io.Discard, body)
	if err != nil || n != 1<<20 {
		t.Errorf("read %d bytes (%v), want the whole 1 MiB blob whatever MaxAnswer", n, err)
	}
	if err := body.Close(); err != nil {
		t.Error(err)
	}
}
