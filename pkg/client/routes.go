package client

import "net/url"

// Kind is a store's kind, as the API's paths name it.
type Kind string

// The two kinds of store.
const (
	Rollouts Kind = "rollouts"
	Generic  Kind = "generic"
)

// ParseKind returns the kind a path segment names ("rollouts" or "generic").
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case Rollouts, Generic:
		return k, nil
	}
	return "", errKind
}

func (k Kind) valid() bool { return k == Rollouts || k == Generic }

// RowsKey is the JSON key rows travel under in add bodies and list answers: a
// rollout store's "records", a generic store's "rows".
func (k Kind) RowsKey() string {
	if k == Rollouts {
		return "records"
	}
	return "rows"
}

// rowKey is the key of one row in a get's answer.
func (k Kind) rowKey() string {
	if k == Rollouts {
		return "record"
	}
	return "row"
}

// The routes: every path of the data API is built here, escaped.
const (
	apiRoot    = "/api/v1"
	healthPath = apiRoot + "/health"
)

func storesPath(k Kind) string               { return apiRoot + "/" + string(k) }
func storePath(k Kind, name string) string   { return storesPath(k) + "/" + url.PathEscape(name) }
func rowsPath(k Kind, name string) string    { return storePath(k, name) + "/" + k.RowsKey() }
func rowPath(k Kind, name, id string) string { return rowsPath(k, name) + "/" + url.PathEscape(id) }
func blobPath(name, id string) string        { return rowPath(Rollouts, name, id) + "/blob" }
func getRowsPath(name string) string         { return storePath(Generic, name) + "/get-rows" }
func flushPath(name string) string           { return storePath(Generic, name) + "/flush" }
func mergeWALPath(name string) string        { return storePath(Generic, name) + "/merge-wal" }
func mergeTargetPath(target string) string {
	return apiRoot + "/internal/merge-wal/" + url.PathEscape(target)
}
func changesPath(k Kind, name string) string { return storePath(k, name) + "/changes" }
func compactPath(k Kind, name string) string { return storePath(k, name) + "/compact" }
func exportPath(k Kind, name string) string  { return storePath(k, name) + "/export" }
func exportTaskPath(k Kind, name, id string) string {
	return exportPath(k, name) + "/" + url.PathEscape(id)
}
func consumerPath(consumer string, k Kind, name string) string {
	return apiRoot + "/consumers/" + url.PathEscape(consumer) + "/" + string(k) + "/" + url.PathEscape(name)
}

func commitPath(consumer string, k Kind, name string) string {
	return consumerPath(consumer, k, name) + "/commit"
}
