package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// maxListLimit bounds ?limit=: a page is held in memory whole, in id order. A list
// without a limit is every row, streamed (listAll).
const maxListLimit = 10000

// CodeUnsupportedMediaType (415): a body whose Content-Type says it is not JSON.
const CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"

// decodeBody decodes the JSON object of r's body into v (a pointer to a struct).
// A Content-Type other than JSON is a 415 (checkJSONContentType), before anything
// is read. The body is read through http.MaxBytesReader, so a body over maxBytes
// fails with *http.MaxBytesError (413) as soon as the limit is crossed, before it
// is held in memory; a declared Content-Length over the limit fails before reading
// at all. Unknown fields, trailing data and malformed JSON are 400s that say what
// is wrong. Strings inside rows are checked by package schema, which refuses text
// that is not UTF-8 instead of repairing it as encoding/json does; v's own string
// fields are names that registry.ValidateName limits to ASCII.
func decodeBody(w http.ResponseWriter, r *http.Request, maxBytes int64, v any) error {
	if err := checkJSONContentType(r); err != nil {
		return err
	}
	if r.ContentLength > maxBytes {
		return &http.MaxBytesError{Limit: maxBytes}
	}
	body := http.MaxBytesReader(w, r.Body, maxBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return bodyError(err)
		}
		return badRequest("malformed JSON: unexpected data after the request object")
	}
	return nil
}

// checkJSONContentType refuses a body labelled as anything but JSON with 415. The
// label is the client's word for what the body is: reading a form (what curl -d
// sends without -H) or text/plain as JSON would be a guess, and those two are
// what a web page may send to any origin without a CORS preflight. A request
// without a Content-Type is read as JSON: Go's http.NewRequest and many scripts
// send none, and nothing in such a request says otherwise. JSON is UTF-8 (RFC
// 8259), so a charset parameter, if given, must say so.
func checkJSONContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	media, params, err := mime.ParseMediaType(ct)
	if err != nil || media != "application/json" {
		return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType, message: fmt.Sprintf(
			"Content-Type %q is not supported: send the body as JSON with Content-Type: application/json (curl: -H 'Content-Type: application/json')", ct)}
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType, message: fmt.Sprintf(
			"Content-Type %q is not supported: JSON bodies are UTF-8; send Content-Type: application/json (charset=utf-8 or none)", ct)}
	}
	return nil
}

// bodyError explains a decode failure to the client.
func bodyError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, io.EOF):
		return badRequest("request body is empty; expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: the request body ends early")
	case errors.As(err, &syntax):
		return badRequest("malformed JSON at byte %d: %s", syntax.Offset, syntax.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("request body must be a JSON object, got %s", typ.Value)
		}
		return badRequest("field %q: expected %s, got %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("request object has %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return badRequest("could not read the request body")
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(goKind string) string {
	switch goKind {
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	}
	return "a number"
}

// pathName returns the validated {name} of the route.
func pathName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := registry.ValidateName(name); err != nil {
		return "", err
	}
	return name, nil
}

// pathID returns the {id} of a row route. Stored ids are valid UTF-8 (package
// schema refuses any other), so an id that is not - %FF in the URL - names no row
// that could exist: it is a malformed request, not a miss to answer 404 or null.
func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !utf8.ValidString(id) {
		return "", badRequest("row id %q in the path is not valid UTF-8", id)
	}
	return id, nil
}

// listPage parses ?limit= (absent: -1, every row; else 0..maxListLimit) and
// ?offset= (default 0, >= 0).
func listPage(r *http.Request) (limit, offset int, err error) {
	q := r.URL.Query()
	if limit, err = intParam(q.Get("limit"), "limit", -1); err != nil {
		return 0, 0, err
	}
	if limit > maxListLimit {
		return 0, 0, badRequest("limit %d is over the maximum of %d; leave limit out to stream every row", limit, maxListLimit)
	}
	if offset, err = intParam(q.Get("offset"), "offset", 0); err != nil {
		return 0, 0, err
	}
	return limit, offset, nil
}

// cursorVersion prefixes every list cursor this build writes: a cursor is opaque
// to clients, and a later format must be told apart from this one.
const cursorVersion = "c1."

// encodeCursor is the next_cursor of a page whose last row has id: URL-safe, so it
// goes back as ?cursor= unescaped.
func encodeCursor(id string) string {
	return cursorVersion + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// startParam parses where a list starts: ?start_after=<id> (the rows after that
// id) or ?cursor=<next_cursor of an earlier page> (the rows after that page's last
// row); nil when neither is given (from the first row). Both at once is a 400, as
// is a cursor this build did not write.
func startParam(r *http.Request) (*string, error) {
	q := r.URL.Query()
	after, hasAfter := q["start_after"]
	cursor, hasCursor := q["cursor"]
	switch {
	case hasAfter && hasCursor:
		return nil, badRequest("start_after and cursor both say where a list starts: give one")
	case hasAfter:
		return &after[0], nil
	case !hasCursor:
		return nil, nil
	}
	c := cursor[0]
	rest, ok := strings.CutPrefix(c, cursorVersion)
	id, err := base64.RawURLEncoding.DecodeString(rest)
	if !ok || err != nil {
		return nil, badRequest("cursor %q is not a next_cursor this server wrote", c)
	}
	s := string(id)
	return &s, nil
}

// intParam parses a non-negative integer query parameter, def when absent.
func intParam(text, name string, def int) (int, error) {
	if text == "" {
		return def, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 0 {
		return 0, badRequest("%s must be a non-negative integer, got %q", name, text)
	}
	return n, nil
}

// flushParam parses ?flush=: a bare ?flush, true (any case) and 1 mean true, as
// in the reference; false (any case), 0 and no flush at all mean false. Anything
// else is a 400 (the reference reads it as false: a typo there silently skips the
// seal the client asked for).
func flushParam(r *http.Request) (bool, error) {
	// The raw query, because url.Values cannot tell a bare ?flush from ?flush=.
	flush := false
	for _, pair := range strings.Split(r.URL.RawQuery, "&") {
		k, v, hasValue := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); err != nil || key != "flush" {
			continue
		}
		text, err := url.QueryUnescape(v)
		switch {
		case err != nil:
			return false, badRequest("flush: %v", err)
		case !hasValue || text == "1" || strings.EqualFold(text, "true"):
			flush = true
		case text == "" || text == "0" || strings.EqualFold(text, "false"):
			// false; another flush pair that says true still wins, as in the reference
		default:
			return false, badRequest("flush must be true, 1, false or 0 (or a bare ?flush), got %q", text)
		}
	}
	return flush, nil
}

// afterParam parses the causal token of r (0: none).
//
// Causal tokens (wal.Writer.AppendAfter): every add answers with the highest _seq it
// gave (httpjson.SeqHeader and the "seq" field); a request that passes it back, in
// httpjson.AfterHeader or ?after=, is ordered after that write: an add gets greater
// _seqs whatever the workers' clocks say, and a read sees every write acknowledged
// with ?flush=true before it, through any worker. The header and the query
// parameter must agree when both are given.
func afterParam(r *http.Request) (uint64, error) {
	var token uint64
	for _, src := range []struct{ name, text string }{
		{httpjson.AfterHeader + " header", r.Header.Get(httpjson.AfterHeader)},
		{"after", r.URL.Query().Get("after")},
	} {
		if src.text == "" {
			continue
		}
		v, err := strconv.ParseUint(src.text, 10, 64)
		if err != nil {
			return 0, badRequest("%s must be the decimal seq of an earlier answer, got %q", src.name, src.text)
		}
		if token != 0 && v != token {
			return 0, badRequest("the %s header (%d) and ?after= (%d) disagree", httpjson.AfterHeader, token, v)
		}
		token = v
	}
	return token, nil
}
