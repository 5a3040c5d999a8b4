package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tidemark-io/tidemark/internal/httpjson"
)

// ArrowStreamType is the media type of an Arrow IPC stream, the body of
// AddArrow and the answer of the Arrow reads (arrow_read.go).
const ArrowStreamType = httpjson.ArrowStreamType

// AddArrow adds the rows of stream, one Arrow IPC stream (a schema message,
// then record batches, as arrow-go's ipc.NewWriter or pyarrow's
// ipc.new_stream write it), to the store k/name: one add, checked against the
// store's schema as JSON rows are (columns by name, in any order). The client
// takes the stream's bytes rather than record batches, so a stream any writer
// made goes as it is; encoding a batch is three lines of arrow-go:
//
//	var buf bytes.Buffer
//	w := ipc.NewWriter(&buf, ipc.WithSchema(rec.Schema()))
//	err := w.Write(rec) // then w.Close()
//
// Rows are deduplicated by id, so re-sending an add that failed never
// duplicates a row; stream is read once, so a retry needs a new reader.
func (c *Client) AddArrow(ctx context.Context, k Kind, name string, stream io.Reader, opts AddOptions) (AddResult, error) {
	var res AddResult
	if !k.valid() {
		return res, errKind
	}
	r := request{method: http.MethodPost, path: rowsPath(k, name), raw: stream, contentType: ArrowStreamType}
	if opts.Flush {
		r.query = url.Values{"flush": {"true"}}
	}
	if opts.After != 0 {
		r.header = http.Header{httpjson.AfterHeader: {strconv.FormatUint(opts.After, 10)}}
	}
	h, err := c.send(ctx, r, &res)
	if err != nil {
		return res, err
	}
	res.BackpressureDelay = backpressureDelay(h)
	return res, nil
}
