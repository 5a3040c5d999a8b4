package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/client"
)

// readIDs reads a stream to its end and returns its rows' ids.
func readIDs(t *testing.T, s *client.ArrowStream, err error) []string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []string
	for s.Next() {
		rec := s.RecordBatch()
		ids := rec.Column(0).(*array.String)
		for i := range ids.Len() {
			out = append(out, ids.Value(i))
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The Arrow reads against a real worker: a full stream, pages walked by their
// NextCursor, storage order, gets, a batch get and a feed page.
func TestArrowReadsAnswerAsTheJSONReads(t *testing.T) {
	ctx := context.Background()
	for _, codec := range []string{"", "zstd"} {
		t.Run("compression="+codec, func(t *testing.T) {
			c := newClient(t, newWorker(t), client.WithToken(token), client.WithArrowCompression(codec))
			read := func(s *client.ArrowStream, err error) []string { t.Helper(); return readIDs(t, s, err) }
			if _, err := c.CreateStore(ctx, client.Generic, client.StoreSpec{Name: "g", Schema: []byte(spec)}); err != nil {
				t.Fatal(err)
			}
			var rows []map[string]any
			var want []string
			for i := range 25 {
				id := fmt.Sprintf("r%02d", i)
				rows = append(rows, map[string]any{"id": id, "n": i})
				want = append(want, id)
			}
			if _, err := c.AddRows(ctx, client.Generic, "g", rows, client.AddOptions{Flush: true}); err != nil {
				t.Fatal(err)
			}
			s, err := c.ListArrow(ctx, client.Generic, "g", client.ListOptions{})
			if s != nil && (s.Count != -1 || s.NextCursor != "" || s.Schema().Field(s.Schema().NumFields()-1).Name != "_seq") {
				t.Errorf("full stream: count %d, cursor %q, schema %s", s.Count, s.NextCursor, s.Schema())
			}
			if got := readIDs(t, s, err); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("ListArrow = %v", got)
			}
			var walked []string
			for cursor, pages := "", 0; pages == 0 || cursor != ""; pages++ {
				s, err := c.ListArrow(ctx, client.Generic, "g", client.ListOptions{Limit: 10, Cursor: cursor})
				if err != nil {
					t.Fatal(err)
				}
				cursor = s.NextCursor
				n := s.Count
				got := readIDs(t, s, nil)
				if n != len(got) {
					t.Fatalf("page %d: Count %d for %d rows", pages, n, len(got))
				}
				walked = append(walked, got...)
			}
			if strings.Join(walked, ",") != strings.Join(want, ",") {
				t.Fatalf("pages walked %v", walked)
			}
			got := read(c.ListArrow(ctx, client.Generic, "g", client.ListOptions{Order: "storage"}))
			if len(got) != len(want) {
				t.Fatalf("storage order: %d rows", len(got))
			}
			if got := read(c.GetRowArrow(ctx, client.Generic, "g", "r07", client.ReadOptions{Columns: []string{"n"}})); strings.Join(got, ",") != "r07" {
				t.Fatalf("GetRowArrow = %v", got)
			}
			if _, err := c.GetRowArrow(ctx, client.Generic, "g", "nope", client.ReadOptions{}); !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("GetRowArrow of a missing row: %v", err)
			}
			if got := read(c.GetRowsArrow(ctx, "g", []string{"r03", "zz", "r01"}, client.ReadOptions{})); strings.Join(got, ",") != "r03,r01" {
				t.Fatalf("GetRowsArrow = %v", got)
			}
			fs, err := c.ChangesArrow(ctx, client.Generic, "g", client.ChangesOptions{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if fs.NextCursor == "" || fs.Count != 10 || fs.Schema().Field(fs.Schema().NumFields()-1).Name != "_cursor" {
				t.Fatalf("ChangesArrow: cursor %q, count %d, schema %s", fs.NextCursor, fs.Count, fs.Schema())
			}
			if got := readIDs(t, fs, nil); len(got) != 10 {
				t.Fatalf("ChangesArrow: %d rows", len(got))
			}
			if _, err := c.ListArrow(ctx, client.Generic, "g", client.ListOptions{Order: "storage", Limit: 3}); !errors.Is(err, client.ErrInvalidRequest) {
				t.Fatalf("order=storage with a limit: %v", err)
			}
		})
	}
}

// A stream that ends without its end-of-stream marker, even at a message
// boundary, is ErrTruncated: the worker cut it.
func TestAnArrowStreamWithoutItsEndIsTruncated(t *testing.T) {
	sch := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sch)
	b.Field(0).(*array.StringBuilder).Append("a")
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	var whole bytes.Buffer
	w := ipc.NewWriter(&whole, ipc.WithSchema(sch))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cut := whole.Bytes()[:whole.Len()-8] // every message, no marker
	for _, tc := range []struct {
		body []byte
		want error
	}{{whole.Bytes(), nil}, {cut, client.ErrTruncated}} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", httpjson.ArrowStreamType)
			_, _ = w.Write(tc.body)
		}))
		c := newClient(t, hs.URL)
		s, err := c.ListArrow(context.Background(), client.Generic, "g", client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for s.Next() {
			n++
		}
		if err := s.Err(); n != 1 || !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%d bytes: %d batches, Err %v; want 1 batch and %v", len(tc.body), n, err, tc.want)
		}
		s.Close()
		hs.Close()
	}
}
