package httpjson

// ArrowStreamType is the media type of the Arrow IPC stream format, which the
// worker's read routes answer when a request asks for it (Accept, or
// ?format=arrow); its answers carry the headers below. They are here, not in
// package worker, so a client names them without linking the server.
const ArrowStreamType = "application/vnd.apache.arrow.stream"

const (
	// NextCursorHeader is the cursor of the next page of an Arrow list page
	// (absent on the last page) or change-feed page: what JSON's next_cursor says.
	NextCursorHeader = "X-Tidemark-Next-Cursor"
	// CountHeader is the number of rows of an Arrow answer read whole before its
	// body (a page, a get, a change-feed page); absent on a stream.
	CountHeader = "X-Tidemark-Count"
	// VersionHeader is the base-table version an Arrow answer read (its schema's
	// tidemark.version).
	VersionHeader = "X-Tidemark-Version"
)
