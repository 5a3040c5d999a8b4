// Package schema defines what a row of each store kind is and how it travels as
// JSON: the fixed Rollout schema, the generic schema Spec a client declares, the
// codecs between JSON rows and Arrow record batches that the HTTP API uses, the
// check of rows a client sends as Arrow, and the rollout list filters.
//
// Invariants:
//
//   - A row that decodes is a row the table accepts. A decoded batch has exactly
//     the schema's columns in order, IDColumn first as a non-empty, non-null utf8
//     string, no null in a non-null column, no hidden column (the WAL appends
//     _seq), and only types the table stores.
//   - Decoding is all or nothing and strict. Any bad row fails the whole batch with
//     an *Error naming the row and the column (and the path inside a nested
//     value); errors.Is(err, ErrInvalid) marks client mistakes for a 400. A key the
//     schema does not declare, a key given twice, a null or missing value in a
//     non-null column, a JSON value of the wrong kind, an integer with a fraction
//     or exponent or outside its width, a float outside its width or a nonzero
//     one that would round to zero in it, invalid base64 (a generic store's
//     binary value may also be an array of bytes, as the reference takes it: an
//     element that is not an integer 0-255 is an error at its index), a vector
//     of the wrong length, a timestamp that is not integer microseconds or RFC
//     3339 within years 0001-9999, and a string or key that is not UTF-8 (raw
//     bytes, or an escaped UTF-16 surrogate without its pair, which
//     encoding/json would turn into U+FFFD) are all errors; nothing is coerced,
//     repaired or silently dropped. Integers are parsed from their JSON literal,
//     so int64 values are exact.
//   - Encoding round-trips. EncodeRows writes, for each row, a JSON object that
//     decodes to the same values: columns in schema order, hidden columns ("_"
//     prefix) left out, nulls as null, binary as standard base64, timestamps as
//     RFC 3339 UTC with six fractional digits (TimestampLayout), floats in the
//     shortest form that parses back to the same float32 or float64, lists and
//     vectors as arrays, the rollout metadata column as its JSON text in a string
//     (NewRowEncoder, for the HTTP API, writes it as the JSON value it holds).
//   - Arrow input is JSON's rows by another road. DecodeArrow (and
//     DecodeRolloutsArrow, with the rollout defaults) reads a client's record
//     batches into the same batch Decode would build: columns matched by name,
//     only types that hold the same values exactly, and the same checks of ids,
//     nulls, strings and timestamps, by the same functions (arrow.go).
//   - One engine. Both store kinds use the same Codec, driven by the Arrow schema;
//     each Arrow type's JSON form is defined once (value.go), for decoding and
//     encoding side by side. The rollout kind adds only its defaults.
//   - A Spec is validated once, at ParseSpec, and is immutable. Its canonical JSON
//     (MarshalJSON) is what the registry persists, and Equal compares canonical
//     forms, so the same declaration spelled differently is the same spec.
package schema
