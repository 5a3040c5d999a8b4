package httpapi

// Arrow IPC answers of the read routes (issue 44): which format a request asks
// for, the schema an answer carries, and the stream that writes it.
//
// Invariants:
//
//   - JSON is the default. A read answers the Arrow IPC stream format
//     (httpjson.ArrowStreamType) only when ?format=arrow, or its Accept header,
//     asks for it; a format or compression it cannot honour is a 400 before the
//     store is opened.
//   - Errors are JSON, whatever was asked, as long as nothing was written: an
//     answer's status and first bytes go out with its first record batch (or its
//     end, for an answer without rows).
//   - An answer is whole or visibly cut: the end-of-stream marker is written only
//     after the last batch of a read that succeeded. A read or a write that fails
//     once bytes went out cuts the connection (http.ErrAbortHandler), so a reader
//     sees a stream without its end, never a shorter one that looks complete.
//   - Every batch of an answer has the answer's schema: the columns answered in
//     table order, id first, _seq last, then the route's own columns (a change's
//     _cursor); the schema's metadata names the store, its kind, the version read
//     and what _seq means (arrowMetadata).

import (
	"bufio"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// The keys of an Arrow answer's schema metadata.
const (
	metaStore   = "tidemark.store"
	metaKind    = "tidemark.kind"
	metaVersion = "tidemark.version"
	metaSeq     = "tidemark.seq"
)

// seqMeaning is the tidemark.seq metadata of every Arrow answer: what the _seq
// column holds (FORMAT.md "Rows and _seq", package rowkey).
const seqMeaning = "_seq: the row version's write sequence, from the hybrid logical clock of the shard " +
	"that wrote it (max(unix_ms << 16, previous + 1): strictly increasing within a shard); higher is newer: " +
	"of the versions of one id the live one has the highest (_seq, shard), and the change feed delivers " +
	"rows in (_seq, id) order; two shards may give the same _seq"

// cursorColumn is the column of a change-feed answer holding each row's cursor
// (JSON's per-change "cursor").
const cursorColumn = "_cursor"

// The IPC buffer compressions a client may ask for.
const (
	compressZstd = "zstd"
	compressLZ4  = "lz4"
)

// answerFormat is what a read answers in: JSON, or the Arrow stream with its
// buffers compressed by codec ("" for none).
type answerFormat struct {
	arrow bool
	codec string
}

// parseAnswerFormat reads the format a read asks for: ?format=arrow|json first,
// then the Accept header (acceptsArrow); ?compression=zstd|lz4 (or an Arrow
// media range's compression parameter) compresses the IPC buffers. An unknown
// format or compression, or a compression asked of a JSON answer, is a 400.
// The answer says it varies with Accept (for caches).
func parseAnswerFormat(w http.ResponseWriter, r *http.Request) (answerFormat, error) {
	w.Header().Add("Vary", "Accept")
	q := r.URL.Query()
	var f answerFormat
	var codec string
	format, hasFormat := q["format"]
	switch {
	case !hasFormat:
		f.arrow, codec = acceptsArrow(r.Header.Values("Accept"))
	case format[0] == "arrow":
		f.arrow = true
	case format[0] == "json":
	default:
		return answerFormat{}, badRequest("format must be arrow or json, got %q", format[0])
	}
	c, named := q["compression"]
	switch {
	case named && !f.arrow:
		return answerFormat{}, badRequest("compression applies to Arrow answers only: ask for one with format=arrow or Accept: %s", httpjson.ArrowStreamType)
	case named:
		codec = c[0]
	case codec == "":
		return f, nil
	}
	switch strings.ToLower(codec) {
	case compressZstd:
		f.codec = compressZstd
	case compressLZ4:
		f.codec = compressLZ4
	default:
		return answerFormat{}, badRequest("compression must be zstd or lz4, got %q", codec)
	}
	return f, nil
}

// acceptsArrow reads Accept header values (RFC 9110 12.5.1: comma-separated
// media ranges, each with parameters and a q weight): whether the Arrow stream
// is preferred, and the compression parameter of its range. Arrow is chosen only
// when a range names its media type with a weight above 0 and above JSON's (the
// weight of application/json if named, else of application/* or */*); on a tie
// a named JSON wins, a wildcard loses to the named Arrow type. No Accept, */*
// alone or ranges that do not parse leave JSON, the default.
func acceptsArrow(values []string) (bool, string) {
	arrowQ, jsonQ, wildQ := -1.0, -1.0, -1.0
	codec := ""
	for _, v := range values {
		for _, rng := range splitAccept(v) {
			media, params, err := mime.ParseMediaType(rng)
			if err != nil {
				continue
			}
			q := 1.0
			if text, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(text, 64); err != nil || q < 0 || q > 1 {
					continue
				}
			}
			switch media {
			case httpjson.ArrowStreamType:
				if q > arrowQ {
					arrowQ, codec = q, params["compression"]
				}
			case "application/json":
				jsonQ = max(jsonQ, q)
			case "application/*", "*/*":
				wildQ = max(wildQ, q)
			}
		}
	}
	if arrowQ <= 0 {
		return false, ""
	}
	if jsonQ >= 0 {
		return arrowQ > jsonQ, codec
	}
	return arrowQ >= wildQ, codec
}

// splitAccept splits an Accept value at the commas outside quoted strings.
func splitAccept(v string) []string {
	var out []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			out = append(out, strings.TrimSpace(v[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(v[start:]))
}

// arrowMetadata is the schema metadata of an Arrow answer of st read at base
// version v.
func arrowMetadata(st *store.Store, v uint64) arrow.Metadata {
	e := st.Entry()
	return arrow.NewMetadata(
		[]string{metaStore, metaKind, metaVersion, metaSeq},
		[]string{e.Name, string(e.Kind), strconv.FormatUint(v, 10), seqMeaning})
}

// arrowSchema is the schema of an Arrow answer: the fields of table (a store's
// table schema) that keep selects, in table order with id first and _seq last
// whether selected or not, then extra, with metadata md. Types are the table's
// (the stored Arrow types, not JSON's renderings).
func arrowSchema(table *arrow.Schema, keep func(name string) bool, md arrow.Metadata, extra ...arrow.Field) *arrow.Schema {
	var fields []arrow.Field
	var id, seq []arrow.Field
	for _, f := range table.Fields() {
		switch {
		case f.Name == rowkey.IDColumn:
			id = append(id, f)
		case f.Name == rowkey.SeqColumn:
			seq = append(seq, f)
		case keep(f.Name):
			fields = append(fields, f)
		}
	}
	fields = slices.Concat(id, fields, seq, extra)
	return arrow.NewSchema(fields, &md)
}

// without is a keep function of arrowSchema: every column but those omit names.
func without(omit []string) func(string) bool {
	return func(c string) bool { return !slices.Contains(omit, c) }
}

// Bounds of the record batches of an Arrow answer (arrowBatcher): a batch holds at
// most arrowBatchRows rows and, when it gathers rows from several reads' batches,
// about arrowBatchBytes; a batch of the read of arrowPassRows rows or more goes
// out as it is.
const (
	arrowBatchRows  = 64 << 10
	arrowBatchBytes = 8 << 20
	arrowPassRows   = 4 << 10
)

// arrowBufferBytes is the buffer between the IPC writer's many small writes and
// the connection.
const arrowBufferBytes = 64 << 10

// ipcAnswer writes one Arrow answer: the status and headers with its first
// bytes, then the schema and each batch as it comes, and the end-of-stream
// marker only when finished.
type ipcAnswer struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	schema *arrow.Schema
	codec  string
	// header is set on the answer before its status (cursor, count, version).
	header http.Header
	buf    *bufio.Writer
	iw     *ipc.Writer
	rows   int64
	// clientErr is a write to the client that failed (it went away), as opposed
	// to a failed read.
	clientErr error
}

// newIPCAnswer returns the stream of an answer of schema with f's compression,
// carrying header.
func newIPCAnswer(w http.ResponseWriter, f answerFormat, schema *arrow.Schema, header http.Header) *ipcAnswer {
	return &ipcAnswer{w: w, rc: http.NewResponseController(w), schema: schema, codec: f.codec, header: header}
}

// started reports whether the answer's status went out: from then on a failure
// can only cut it.
func (a *ipcAnswer) started() bool { return a.iw != nil }

func (a *ipcAnswer) start() {
	h := a.w.Header()
	for k, v := range a.header {
		h[k] = v
	}
	h.Set("Content-Type", httpjson.ArrowStreamType)
	a.w.WriteHeader(http.StatusOK)
	opts := []ipc.Option{ipc.WithSchema(a.schema), ipc.WithAllocator(memory.DefaultAllocator)}
	switch a.codec {
	case compressZstd:
		opts = append(opts, ipc.WithZstd())
	case compressLZ4:
		opts = append(opts, ipc.WithLZ4())
	}
	a.buf = bufio.NewWriterSize(clientWriter{a}, arrowBufferBytes)
	a.iw = ipc.NewWriter(a.buf, opts...)
}

// write writes rec (of the answer's schema), with the schema before the first.
func (a *ipcAnswer) write(rec arrow.RecordBatch) error {
	if !a.started() {
		a.start()
	}
	// Each batch gets the whole write timeout: a stream of millions of rows
	// takes longer than one request may.
	_ = a.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := a.iw.Write(rec); err != nil {
		return a.failed(err)
	}
	a.rows += rec.NumRows()
	if err := a.buf.Flush(); err != nil {
		return a.failed(err)
	}
	if err := a.rc.Flush(); err != nil {
		return a.failed(err)
	}
	return nil
}

// finish ends a read that succeeded: the schema if no batch went out, then the
// end-of-stream marker.
func (a *ipcAnswer) finish() error {
	if !a.started() {
		a.start()
	}
	_ = a.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := a.iw.Close(); err != nil {
		return a.failed(err)
	}
	if err := a.buf.Flush(); err != nil {
		return a.failed(err)
	}
	return nil
}

func (a *ipcAnswer) failed(err error) error {
	if a.clientErr != nil {
		return a.clientErr
	}
	return fmt.Errorf("arrow stream: %w", err)
}

// clientWriter is the connection under an ipcAnswer's buffer; it remembers a
// failed write.
type clientWriter struct{ a *ipcAnswer }

func (c clientWriter) Write(p []byte) (int, error) {
	n, err := c.a.w.Write(p)
	if err != nil && c.a.clientErr == nil {
		c.a.clientErr = fmt.Errorf("writing the answer: %w", err)
	}
	return n, err
}

// serveArrow answers r with an Arrow stream of schema carrying header: body
// hands each batch of the answer to emit, in order. A failure before any byte
// went out is returned (the JSON error answer); one after cuts the connection.
// A failed stream is never closed: ipc.Writer.Close writes the end-of-stream
// marker even after a failed write, and a marker is the promise that the
// answer is whole.
func (s *Server) serveArrow(w http.ResponseWriter, r *http.Request, f answerFormat, schema *arrow.Schema, header http.Header, body func(emit func(arrow.RecordBatch) error) error) error {
	st := newIPCAnswer(w, f, schema, header)
	err := body(st.write)
	if err == nil {
		err = st.finish()
	}
	switch {
	case err == nil:
		return nil
	case !st.started():
		return err
	case st.clientErr != nil && errors.Is(err, st.clientErr):
		s.cfg.Logger.Debug("arrow stream: client went away", "path", r.URL.Path, "rows_sent", st.rows, "err", err)
	default:
		s.cfg.Logger.Warn("arrow stream cut off", "route", r.Pattern, "path", r.URL.Path, "rows_sent", st.rows, "err", err)
	}
	panic(http.ErrAbortHandler)
}

// arrowHeader is the header of an Arrow answer that read base version v.
func arrowHeader(v uint64) http.Header {
	h := http.Header{}
	h.Set(httpjson.VersionHeader, strconv.FormatUint(v, 10))
	return h
}
