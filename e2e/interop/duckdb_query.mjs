// duckdb_query.mjs: runs SQL in DuckDB (npm @duckdb/node-api) and prints each query's rows
// as JSON, for the Go test that opens an export with a reader not written here
// (e2e/interop_test.go). 64-bit integers and other values DuckDB hands out as objects are
// printed as strings.
//
//   node duckdb_query.mjs '["SELECT ...", "SELECT ..."]'
import { DuckDBInstance } from "@duckdb/node-api";

const queries = JSON.parse(process.argv[2]);
const db = await DuckDBInstance.create(":memory:");
const conn = await db.connect();
const out = [];
for (const sql of queries) {
  const reader = await conn.runAndReadAll(sql);
  out.push(reader.getRowObjectsJson());
}
process.stdout.write(JSON.stringify(out));
