package schema

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// Rollout columns that the codec or the filters treat specially.
const (
	RolloutIDColumn   = "rollout_id"
	ProblemIDColumn   = "problem_id"
	RoleColumn        = "role"
	SequenceColumn    = "sequence_order"
	CreatedAtColumn   = "created_at"
	ContentTypeColumn = "content_type"
	MetadataColumn    = "metadata"
	// BinaryPayloadColumn holds a record's artifact bytes (its blob);
	// PayloadSizeColumn is the size the client declared for them.
	BinaryPayloadColumn = "binary_payload"
	PayloadSizeColumn   = "payload_size"
)

// Rollout defaults, applied by DecodeRollouts when a record leaves the column out
// or sets it to null. sequence_order defaults to 0, as in the reference API,
// whose clients read it as a number that is never null.
const (
	DefaultRole        = "assistant"
	DefaultContentType = "text/plain"
)

var (
	utf8Type      = arrow.BinaryTypes.String
	timestampType = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}

	rolloutSchema = arrow.NewSchema([]arrow.Field{
		{Name: IDColumn, Type: utf8Type},
		{Name: RolloutIDColumn, Type: utf8Type, Nullable: true},
		{Name: ProblemIDColumn, Type: utf8Type, Nullable: true},
		{Name: "dataset", Type: utf8Type, Nullable: true},
		// Nullable in the table (rows written before its default came may be
		// null); DecodeRollouts writes 0 when a record leaves it out.
		{Name: SequenceColumn, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		// role, created_at and content_type always have a value (a default fills
		// them), so the schema says so.
		{Name: RoleColumn, Type: utf8Type},
		{Name: CreatedAtColumn, Type: timestampType},
		{Name: "content", Type: utf8Type, Nullable: true},
		{Name: ContentTypeColumn, Type: utf8Type},
		{Name: "model_input_string", Type: utf8Type, Nullable: true},
		{Name: "model_output_string", Type: utf8Type, Nullable: true},
		{Name: "rationale", Type: utf8Type, Nullable: true},
		{Name: "problem_text", Type: utf8Type, Nullable: true},
		{Name: "user_metadata", Type: utf8Type, Nullable: true},
		// List elements are nullable, Arrow's default: prompt logprobs have no
		// value for the first token.
		{Name: "input_tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "output_tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "output_logprobs", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32), Nullable: true},
		{Name: "input_logprobs", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32), Nullable: true},
		{Name: "ref_logprobs", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32), Nullable: true},
		{Name: "loss_mask", Type: arrow.ListOf(arrow.PrimitiveTypes.Int8), Nullable: true},
		{Name: "num_input_tokens", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "num_output_tokens", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "advantage", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "reward", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "raw_reward", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "grader_id", Type: utf8Type, Nullable: true},
		{Name: "include_in_training", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "exclude_reason", Type: utf8Type, Nullable: true},
		{Name: "policy_version", Type: utf8Type, Nullable: true},
		// A relationship without a target or a relation says nothing, so those two
		// are required inside each element; the weight is optional.
		{Name: "relationships", Type: arrow.ListOf(arrow.StructOf(
			arrow.Field{Name: "target_id", Type: utf8Type},
			arrow.Field{Name: "relation", Type: utf8Type},
			arrow.Field{Name: "weight", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		)), Nullable: true},
		{Name: BinaryPayloadColumn, Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: PayloadSizeColumn, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "payload_checksum", Type: utf8Type, Nullable: true},
		{Name: "artifact_type", Type: utf8Type, Nullable: true},
		// metadata is JSON text: any JSON value is accepted and stored compacted; a
		// JSON string is stored as the text it holds. It is returned as a string.
		{Name: MetadataColumn, Type: utf8Type, Nullable: true},
	}, nil)

	rolloutCodec = mustCodec(newCodec(rolloutSchema, jsonTextColumns(MetadataColumn)))
)

func mustCodec(c *Codec, err error) *Codec {
	if err != nil {
		panic(err)
	}
	return c
}

// Rollout returns the schema of a rollout store's records, without _seq. Every
// call returns the same schema; callers must not modify it.
func Rollout() *arrow.Schema { return rolloutSchema }

// RolloutCodec returns the codec of Rollout records. Its Decode applies no
// defaults; DecodeRollouts does.
func RolloutCodec() *Codec { return rolloutCodec }

// DecodeRollouts decodes rollout records (the "records" array of an add request)
// into one batch of the Rollout schema, filling defaults for columns a record
// leaves out or sets to null: problem_id = the record's rollout_id, sequence_order
// = 0, role = DefaultRole, created_at = now (truncated to the microsecond),
// content_type = DefaultContentType. Errors are as for Codec.Decode.
func DecodeRollouts(records []json.RawMessage, now time.Time) (arrow.RecordBatch, error) {
	c := rolloutCodec
	rollout, problem := c.index[RolloutIDColumn], c.index[ProblemIDColumn]
	role, created, ctype := c.index[RoleColumn], c.index[CreatedAtColumn], c.index[ContentTypeColumn]
	sequence := c.index[SequenceColumn]
	nowJSON := strconv.AppendInt(nil, now.UnixMicro(), 10)
	return c.decode(records, func(vals [][]byte) {
		absent := func(v []byte) bool { return v == nil || isNull(v) }
		if absent(vals[problem]) && !absent(vals[rollout]) {
			vals[problem] = vals[rollout]
		}
		if absent(vals[sequence]) {
			vals[sequence] = zeroJSON
		}
		if absent(vals[role]) {
			vals[role] = defaultRoleJSON
		}
		if absent(vals[created]) {
			vals[created] = nowJSON
		}
		if absent(vals[ctype]) {
			vals[ctype] = defaultContentTypeJSON
		}
	})
}

var (
	zeroJSON               = []byte("0")
	defaultRoleJSON        = appendString(nil, DefaultRole)
	defaultContentTypeJSON = appendString(nil, DefaultContentType)
)
