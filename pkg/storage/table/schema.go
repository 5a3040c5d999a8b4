package table

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/tidemark-io/tidemark/internal/ipcguard"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// checkSchema verifies the columns every table depends on.
func checkSchema(s *arrow.Schema) error {
	idx := s.FieldIndices(rowkey.IDColumn)
	if len(idx) != 1 {
		return fmt.Errorf("schema needs exactly one %q column", rowkey.IDColumn)
	}
	if f := s.Field(idx[0]); f.Type.ID() != arrow.STRING || f.Nullable {
		return fmt.Errorf("column %q must be a non-null utf8 string, is %s (nullable=%v)", rowkey.IDColumn, f.Type, f.Nullable)
	}
	idx = s.FieldIndices(rowkey.SeqColumn)
	if len(idx) != 1 {
		return fmt.Errorf("schema needs exactly one %q column", rowkey.SeqColumn)
	}
	if f := s.Field(idx[0]); f.Type.ID() != arrow.UINT64 || f.Nullable {
		return fmt.Errorf("column %q must be a non-null uint64, is %s (nullable=%v)", rowkey.SeqColumn, f.Type, f.Nullable)
	}
	return nil
}

// checkRecord verifies that rec can be appended to a table of schema s, naming the
// first column that does not fit.
func checkRecord(s *arrow.Schema, rec arrow.RecordBatch) error {
	rs := rec.Schema()
	if rs.NumFields() != s.NumFields() {
		for i := 0; i < s.NumFields(); i++ {
			if len(rs.FieldIndices(s.Field(i).Name)) == 0 {
				return fmt.Errorf("record batch lacks column %q", s.Field(i).Name)
			}
		}
		for i := 0; i < rs.NumFields(); i++ {
			if len(s.FieldIndices(rs.Field(i).Name)) == 0 {
				return fmt.Errorf("record batch has column %q that the table does not", rs.Field(i).Name)
			}
		}
	}
	for i := 0; i < s.NumFields(); i++ {
		want, got := s.Field(i), rs.Field(i)
		if want.Name != got.Name {
			return fmt.Errorf("column %d is %q, table has %q there", i, got.Name, want.Name)
		}
		if !arrow.TypeEqual(want.Type, got.Type) {
			return fmt.Errorf("column %q has type %s, table has %s", got.Name, got.Type, want.Type)
		}
		if !want.Nullable && rec.Column(i).NullN() > 0 {
			return fmt.Errorf("column %q is not nullable but has %d nulls", got.Name, rec.Column(i).NullN())
		}
	}
	return nil
}

// schemaJSON carries an Arrow schema in a manifest as a base64 Arrow IPC stream that
// holds only the schema message: exact for every type, nested ones included.
type schemaJSON struct{ s *arrow.Schema }

func (j schemaJSON) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(j.s))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(buf.Bytes()))
}

func (j *schemaJSON) UnmarshalJSON(data []byte) error {
	var b64 string
	if err := json.Unmarshal(data, &b64); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	s, err := decodeIPCSchema(raw)
	if err != nil {
		return err
	}
	j.s = s
	return nil
}

// decodeIPCSchema reads the schema message of an IPC stream; malformed input is an
// error, never a panic or an out-of-memory (the IPC reader trusts its flatbuffers:
// ipcguard checks them first, and recover catches what remains).
func decodeIPCSchema(raw []byte) (s *arrow.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("schema: malformed IPC schema message: %v", r)
		}
	}()
	if err := ipcguard.CheckStream(raw); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	r, err := ipc.NewReader(bytes.NewReader(raw), ipc.WithMetadataSizeLimit(int64(len(raw))))
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	defer r.Release()
	return r.Schema(), nil
}
