// Package rowfilter compiles a SQL predicate, the filter= of a generic list,
// against a store's Arrow schema and evaluates it over record batches.
//
// One job: text in, a per-row verdict out. Parsing is vitess's MySQL-dialect
// parser (vitess.io/vitess/go/vt/sqlparser): the predicate is wrapped as
// "SELECT * FROM t WHERE <predicate>" and anything that does not come back as
// exactly that statement with a plain expression after WHERE (a second
// statement, ORDER BY, LIMIT, UNION, a subquery) is refused. The AST is then
// checked and compiled into a small tree of this package's own nodes, so
// evaluation never touches the parser's types.
//
// # Semantics
//
// Supported: comparisons = != <> < <= > >= and <=> (null-safe equality);
// AND, OR, XOR, NOT (and !); IN and NOT IN over constant lists; BETWEEN and
// NOT BETWEEN; IS [NOT] NULL, IS [NOT] TRUE, IS [NOT] FALSE; LIKE and NOT LIKE
// with % (any run of characters), _ (one character) and an ESCAPE character
// (backslash unless ESCAPE names another); parentheses; number, string, TRUE,
// FALSE and NULL literals, and TIMESTAMP/DATE 'text' literals. A bare boolean
// column is a predicate of its own ("WHERE done").
//
// Evaluation follows SQL's three-valued logic: a comparison with NULL is
// UNKNOWN, NOT UNKNOWN is UNKNOWN, FALSE AND UNKNOWN is FALSE, TRUE OR UNKNOWN
// is TRUE, x IN (..., NULL) is UNKNOWN when no element equals x, and a row is
// kept only when the whole predicate is TRUE.
//
// Typing is checked at compile time, against the schema, so a bad filter fails
// before any row is read: a column the schema lacks (names starting with "_"
// are hidden and never match) is ErrUnknownColumn, and a comparison whose sides
// cannot meet (a string column with a number, LIKE on an integer, a vector
// anywhere but IS NULL) is ErrType naming the column and its type. Numbers meet
// numbers: two integers compare exactly, anything with a float as float64,
// except that a float32 column compares with a constant rounded to float32 (so
// score = 0.1 finds the 0.1 that was stored). A timestamp column compares with
// an RFC 3339 string ('2024-05-01T12:00:00Z', or '2024-05-01 12:00:00' and
// '2024-05-01' read as UTC), a TIMESTAMP/DATE literal, or integer microseconds.
// Strings compare by bytes (UTF-8 order) and LIKE is case-sensitive, as in the
// reference system's DataFusion. Binary, vector and list columns take only
// IS [NOT] NULL.
//
// Dialect notes (vitess parses MySQL): quote an identifier with backticks
// (`my col`); "text" in double quotes is a string, so a comparison of two
// string constants is refused with a hint, as it almost always means a
// mis-quoted column. Backslash escapes inside string literals follow MySQL
// ('\n' is a newline, '\\' one backslash, '\%' and '\_' stay two characters so
// LIKE sees the escape). Unquoted column names match exactly, or else the one
// column whose name matches ignoring case.
//
// Every compile error is an *Error that matches ErrInvalid and one of the
// sentinels below (errors.Is), for a 400 naming the problem. Compiling is
// bounded: predicates longer than MaxBytes or nested deeper than MaxDepth are
// refused. A compiled Filter is immutable and safe for concurrent use.
package rowfilter
