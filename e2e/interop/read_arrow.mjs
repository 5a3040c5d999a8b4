// read_arrow.mjs: reads one Tidemark answer as an Arrow IPC stream with JavaScript Arrow
// (npm apache-arrow), batch by batch as it arrives, and prints it as JSON for the Go test
// that checks it (e2e/interop_test.go): the schema, its metadata, the response headers and
// every row. 64-bit integers are printed as strings, binary values as base64.
//
//   node read_arrow.mjs GET <url>
//   node read_arrow.mjs POST <url> '<json body>'
import { RecordBatchReader } from "apache-arrow";

const [method, url, body] = process.argv.slice(2);
const res = await fetch(url, {
  method,
  headers: { Accept: "application/vnd.apache.arrow.stream", ...(body ? { "Content-Type": "application/json" } : {}) },
  body,
});
if (res.status !== 200) {
  console.error(`HTTP ${res.status}: ${await res.text()}`);
  process.exit(2);
}
const type = res.headers.get("content-type");
if (!type || !type.startsWith("application/vnd.apache.arrow.stream")) {
  console.error(`content-type ${type}, want the Arrow stream`);
  process.exit(2);
}
const reader = await RecordBatchReader.from(res);
await reader.open();
// The schema before the batches: a reader that reached its end is reset.
const schema = reader.schema;
const rows = [];
let batches = 0;
for await (const batch of reader) {
  batches++;
  for (const row of batch) rows.push(row.toJSON());
}
const headers = {};
for (const [k, v] of res.headers) if (k.startsWith("x-tidemark-")) headers[k] = v;
const out = {
  fields: schema.fields.map((f) => ({ name: f.name, type: String(f.type), nullable: f.nullable })),
  metadata: Object.fromEntries(schema.metadata),
  headers,
  batches,
  rows,
};
process.stdout.write(
  JSON.stringify(out, (_, v) => {
    if (typeof v === "bigint") return v.toString();
    if (v instanceof Uint8Array) return Buffer.from(v).toString("base64");
    return v;
  }),
);
