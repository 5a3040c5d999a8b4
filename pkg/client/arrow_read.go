package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/tidemark-io/tidemark/internal/httpjson"
)

// ErrTruncated marks an Arrow stream that ended without its end-of-stream
// marker: the worker cut it (its read failed midway) or the connection broke.
// The batches read before it are a prefix of the answer, not all of it.
var ErrTruncated = errors.New("arrow stream cut off before its end")

// ArrowStream is an Arrow IPC answer being read (docs/API.md "Arrow IPC"): the
// embedded ipc.Reader's Next, RecordBatch and Schema read it batch by batch, as
// the worker writes it, and Err says why it ended (ErrTruncated for a stream
// without its end). The caller closes it; a stream is read within the client's
// timeout (WithTimeout(-1) for a full read of a large store).
type ArrowStream struct {
	*ipc.Reader
	// NextCursor is the next page's cursor (X-Tidemark-Next-Cursor): set on a
	// page of a list that rows follow and on every change-feed page, "" on a
	// list's last page and on a full stream (whose last row's id is the
	// StartAfter of a walk resumed after it).
	NextCursor string
	// Count is the number of rows of an answer read whole before it was sent (a
	// page, a get, a change-feed page); -1 for a stream.
	Count int
	// Version is the base-table version the answer read (the schema metadata's
	// tidemark.version).
	Version uint64

	body   *eosReader
	cancel context.CancelFunc
	err    error
}

// Next advances to the next batch; false at the end of the stream or on an
// error (Err).
func (s *ArrowStream) Next() bool {
	if s.Reader.Next() {
		return true
	}
	if s.err == nil && s.Reader.Err() == nil {
		s.err = s.body.end()
	}
	return false
}

// Err is why the stream ended early; nil once it ended whole.
func (s *ArrowStream) Err() error {
	if s.err != nil {
		return s.err
	}
	return s.Reader.Err()
}

// Close releases the reader and ends the call.
func (s *ArrowStream) Close() error {
	s.Reader.Release()
	err := s.body.rc.Close()
	s.cancel()
	return err
}

// ListArrow reads the rows of the store k/name as an Arrow stream: a page with
// opts.Limit (NextCursor set when rows follow), else every row, streamed, in id
// order or, with opts.Order "storage", in storage order.
func (c *Client) ListArrow(ctx context.Context, k Kind, name string, opts ListOptions) (*ArrowStream, error) {
	if !k.valid() {
		return nil, errKind
	}
	q, err := opts.query()
	if err != nil {
		return nil, err
	}
	return c.openArrow(ctx, request{method: http.MethodGet, path: rowsPath(k, name), query: q})
}

// GetRowArrow reads the row id of the store k/name as an Arrow stream of one
// row, or of none for an absent rollout record (an absent generic row is an
// *Error matching ErrNotFound, as in GetRow).
func (c *Client) GetRowArrow(ctx context.Context, k Kind, name, id string, opts ReadOptions) (*ArrowStream, error) {
	if !k.valid() {
		return nil, errKind
	}
	return c.openArrow(ctx, request{method: http.MethodGet, path: rowPath(k, name, id), query: opts.query(url.Values{})})
}

// GetRowsArrow is GetRows answered as an Arrow stream.
func (c *Client) GetRowsArrow(ctx context.Context, name string, ids []string, opts ReadOptions) (*ArrowStream, error) {
	return c.openArrow(ctx, getRowsRequest(name, ids, opts))
}

// ChangesArrow reads a page of the store k/name's change feed as an Arrow
// stream: each row with its cursor in the last column, _cursor, and the next
// page's cursor in NextCursor.
func (c *Client) ChangesArrow(ctx context.Context, k Kind, name string, opts ChangesOptions) (*ArrowStream, error) {
	if !k.valid() {
		return nil, errKind
	}
	q, err := opts.query()
	if err != nil {
		return nil, err
	}
	return c.openArrow(ctx, request{method: http.MethodGet, path: changesPath(k, name), query: q, wait: opts.Wait})
}

// openArrow makes the call r asking for an Arrow answer (compressed as
// WithArrowCompression says) and opens its stream.
func (c *Client) openArrow(ctx context.Context, r request) (*ArrowStream, error) {
	r.header = r.header.Clone()
	if r.header == nil {
		r.header = http.Header{}
	}
	accept := ArrowStreamType
	if c.arrowCompression != "" {
		accept += ";compression=" + c.arrowCompression
	}
	r.header.Set("Accept", accept)
	resp, cancel, err := c.open(ctx, r)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*ArrowStream, error) {
		resp.Body.Close()
		cancel()
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != ArrowStreamType {
		return fail(fmt.Errorf("%s %s: %w: Content-Type %q, want %s", r.method, r.path, ErrUndecodable, ct, ArrowStreamType))
	}
	s := &ArrowStream{Count: -1, body: &eosReader{rc: resp.Body}, cancel: cancel, NextCursor: resp.Header.Get(httpjson.NextCursorHeader)}
	if text := resp.Header.Get(httpjson.CountHeader); text != "" {
		if s.Count, err = strconv.Atoi(text); err != nil {
			return fail(fmt.Errorf("%s %s: %w: %s %q", r.method, r.path, ErrUndecodable, httpjson.CountHeader, text))
		}
	}
	if text := resp.Header.Get(httpjson.VersionHeader); text != "" {
		if s.Version, err = strconv.ParseUint(text, 10, 64); err != nil {
			return fail(fmt.Errorf("%s %s: %w: %s %q", r.method, r.path, ErrUndecodable, httpjson.VersionHeader, text))
		}
	}
	// One batch is held at a time: bounded as one answer is.
	if s.Reader, err = ipc.NewReader(s.body, ipc.WithBodySizeLimit(c.maxAnswer)); err != nil {
		return fail(fmt.Errorf("%s %s: %w: %v", r.method, r.path, ErrUndecodable, err))
	}
	return s, nil
}

// arrowEOS is the end-of-stream marker of the IPC stream format: a
// continuation token and a zero length.
var arrowEOS = []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}

// eosReader is an answer's body that remembers the last bytes it passed, so the
// end of a stream can be told from a cut: arrow-go's reader takes a bare EOF
// between two messages for the end.
type eosReader struct {
	rc   io.ReadCloser
	tail []byte
}

func (r *eosReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if n > 0 {
		r.tail = append(r.tail, p[:n]...)
		if len(r.tail) > len(arrowEOS) {
			r.tail = append(r.tail[:0], r.tail[len(r.tail)-len(arrowEOS):]...)
		}
	}
	return n, err
}

// end checks, once the IPC reader has seen the last message, that the stream
// ended with its marker and nothing follows it.
func (r *eosReader) end() error {
	if n, err := io.Copy(io.Discard, io.LimitReader(r, 1)); err != nil {
		return fmt.Errorf("%w: %w", ErrTruncated, err)
	} else if n > 0 {
		return fmt.Errorf("%w: data after the end-of-stream marker", ErrUndecodable)
	}
	if !bytes.Equal(r.tail, arrowEOS) {
		return ErrTruncated
	}
	return nil
}
