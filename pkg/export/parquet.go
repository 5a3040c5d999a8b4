package export

import (
	"context"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// Row groups are cut at rowGroupRows rows or rowGroupBytes of Arrow data,
// whichever comes first: what a reader decodes at once, and what the writer
// holds (a row group is encoded in memory before it is written out).
const (
	rowGroupRows  = 1 << 20
	rowGroupBytes = 128 << 20
)

// The key-value metadata of every file (and of its stored Arrow schema).
const (
	metaFormat  = "tidemark.export.format"
	metaStore   = "tidemark.store"
	metaVersion = "tidemark.version"
	metaSeq     = "tidemark._seq"
	// seqMeaning is what metaSeq says.
	seqMeaning = "the row's write sequence: its position in the store's change feed (a row's newer versions have larger ones)"
)

// partWriter writes one attempt's Parquet files, cutting row groups and files
// as it goes.
type partWriter struct {
	dst     *objstore.Bucket
	sc      *store.Scan
	schema  *arrow.Schema // the scan's, with the export's metadata
	token   string
	opts    Options
	props   *parquet.WriterProperties
	rgBytes int64 // the row-group cut in Arrow bytes

	keys  []string         // every key this attempt began, for discard
	files []exportfmt.File // the files closed
	cur   *part            // the file being written
	rows  int64            // rows written, all files
	bytes int64            // bytes of the files closed
}

// part is a file being written.
type part struct {
	key     string
	w       *objstore.Writer
	fw      *pqarrow.FileWriter
	rows    int64
	rgRows  int64 // rows of the row group being encoded
	rgBytes int64 // its Arrow bytes
	rgFull  bool  // start a new row group before the next row
	full    bool  // close the file before the next row
}

func newPartWriter(dst *objstore.Bucket, sc *store.Scan, target registry.Target, token string, opts Options) *partWriter {
	fields := sc.Schema().Fields()
	md := arrow.NewMetadata(
		[]string{metaFormat, metaStore, metaVersion, metaSeq},
		[]string{exportfmt.Format, target.String(), strconv.FormatUint(sc.Version(), 10), seqMeaning})
	// Pages (and dictionaries) small enough that the bytes flushed so far
	// measure a file well against its cut: a page is counted once it is encoded.
	page := min(max(opts.MaxFileBytes/64, 4<<10), 1<<20)
	props := parquet.NewWriterProperties(
		// zstd: every reader we serve decodes it (DuckDB, pyarrow, Polars, Spark),
		// and it is what the store's own fragments use.
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithStats(true),
		parquet.WithMaxRowGroupLength(rowGroupRows),
		parquet.WithDataPageSize(page),
		parquet.WithDictionaryPageSizeLimit(page),
		// Ids are distinct: a dictionary would be as large as the column.
		parquet.WithDictionaryFor(rowkey.IDColumn, false),
	)
	return &partWriter{
		dst: dst, sc: sc, token: token, opts: opts, props: props,
		schema:  arrow.NewSchema(fields, &md),
		rgBytes: min(rowGroupBytes, opts.MaxFileBytes),
	}
}

// write writes every row of the scan and returns the files, all closed. On
// error the file being written is aborted (never published); the files closed
// before stay, for the caller to discard.
func (pw *partWriter) write(ctx context.Context) ([]exportfmt.File, error) {
	err := pw.sc.Each(ctx, func(rec arrow.RecordBatch) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return pw.add(ctx, rec)
	})
	if err == nil && pw.cur == nil && len(pw.files) == 0 {
		// No row: one file all the same, so readers get the schema.
		err = pw.open(ctx)
	}
	if err == nil && pw.cur != nil {
		err = pw.close()
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		if pw.cur != nil {
			pw.cur.w.Abort()
			pw.cur = nil
		}
		return nil, err
	}
	return pw.files, nil
}

// add writes rec, cut where a row group or a file ends.
func (pw *partWriter) add(ctx context.Context, rec arrow.RecordBatch) error {
	n := rec.NumRows()
	if n == 0 {
		return nil
	}
	size := arrowBytes(rec)
	for off := int64(0); off < n; {
		if err := pw.roll(ctx); err != nil {
			return err
		}
		c := pw.cur
		// As many rows as fit the row group, by count and by (average) bytes: a
		// batch of large rows is cut too.
		perRow := max(size/n, 1)
		take := min(n-off, rowGroupRows-c.rgRows, max((pw.rgBytes-c.rgBytes)/perRow, 1))
		piece := rec
		if take < n {
			piece = rec.NewSlice(off, off+take)
		}
		err := c.fw.WriteBuffered(piece)
		if take < n {
			piece.Release()
		}
		if err != nil {
			return fmt.Errorf("export: write %s: %w", c.key, err)
		}
		c.rows += take
		c.rgRows += take
		c.rgBytes += perRow * take
		pw.rows += take
		off += take
		switch {
		case c.w.Written()+c.fw.RowGroupTotalBytesWritten() >= pw.opts.MaxFileBytes:
			c.full = true
		case c.rgRows >= rowGroupRows || c.rgBytes >= pw.rgBytes:
			c.rgFull = true
		}
	}
	return nil
}

// roll makes the file and row group the next row goes in: it closes a full file
// or starts a new row group after a full one (flushing it to the bucket), then
// opens a file if none is open. Nothing is cut until a row follows, so no file
// or row group is ever empty.
func (pw *partWriter) roll(ctx context.Context) error {
	if c := pw.cur; c != nil && c.full {
		if err := pw.close(); err != nil {
			return err
		}
	}
	if c := pw.cur; c != nil && c.rgFull {
		if err := c.fw.NewBufferedRowGroupChecked(); err != nil {
			return fmt.Errorf("export: write %s: %w", c.key, err)
		}
		c.rgRows, c.rgBytes, c.rgFull = 0, 0, false
		pw.report()
	}
	if pw.cur == nil {
		return pw.open(ctx)
	}
	return nil
}

// open begins the attempt's next file.
func (pw *partWriter) open(ctx context.Context) error {
	key := partName(pw.token, len(pw.files))
	w, err := pw.dst.NewWriter(ctx, key)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	pw.keys = append(pw.keys, key)
	// The sink hides w's Close: pqarrow closes its sink when it closes, even after
	// a failed write, and that would publish a broken file. Only close publishes.
	fw, err := pqarrow.NewFileWriter(pw.schema, sink{w}, pw.props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		w.Abort()
		return fmt.Errorf("export: %s: parquet writer: %w", key, err)
	}
	pw.cur = &part{key: key, w: w, fw: fw}
	pw.report()
	return nil
}

// close finishes the file being written (its last row group and footer) and
// publishes it.
func (pw *partWriter) close() error {
	c := pw.cur
	if err := c.fw.Close(); err != nil {
		return fmt.Errorf("export: write %s: %w", c.key, err)
	}
	if err := c.w.Close(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	pw.files = append(pw.files, exportfmt.File{Path: c.key, Rows: c.rows, Bytes: c.w.Written()})
	pw.bytes += c.w.Written()
	pw.cur = nil
	pw.report()
	return nil
}

// report tells the caller how far the attempt got.
func (pw *partWriter) report() {
	p := Progress{Rows: pw.rows, Files: int64(len(pw.files)), Bytes: pw.bytes, Estimate: pw.sc.Estimate()}
	if pw.cur != nil {
		p.Files++
		p.Bytes += pw.cur.w.Written()
	}
	pw.opts.Progress(p)
}

// sink is an objstore.Writer without its Close (see open).
type sink struct{ w *objstore.Writer }

func (s sink) Write(p []byte) (int, error) { return s.w.Write(p) }

// arrowBytes is the size of rec's buffers: what a row group's cut measures.
// (arrow/util's TotalRecordSize would link protobuf reflection for it.)
func arrowBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		n += dataBytes(c.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	return n
}
