package dashboard

import (
	"encoding/json"
	"fmt"

	"github.com/dustin/go-humanize"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// taskResult is what a task list's result cell says when the task has no error:
// its detail, or, for an export not yet done, where it writes and how far it got
// ("export to s3://b/x: 1,200 of ~5,000 rows, 1 file, 3.1 MiB (on w1)"), so an
// operator follows a long export from the list. The page's script writes the
// same text from the event stream (taskJSON's detail).
func taskResult(t *tidemarkv1.Task) string {
	var p *tasks.Progress
	if tp := t.GetProgress(); tp != nil {
		p = &tasks.Progress{Rows: tp.GetRows(), Files: tp.GetFiles(), Bytes: tp.GetBytes(), Estimate: tp.GetEstimate(), Worker: tp.GetWorker()}
	}
	return resultText(tasks.Kind(t.GetKind()), tasks.State(t.GetState()), t.GetDetail(), t.GetExport().GetDestination(), p, t.GetCancelRequested())
}

// storeTaskResult is taskResult of a task record (the event stream's).
func storeTaskResult(t tasks.Task) string {
	var spec exportfmt.Spec
	_ = json.Unmarshal(t.Export, &spec) // none, or unreadable: no destination to show
	return resultText(t.Kind, t.State, t.Detail, spec.Destination, t.Progress, t.CancelRequested)
}

func resultText(kind tasks.Kind, state tasks.State, detail, destination string, p *tasks.Progress, cancelling bool) string {
	if kind != tasks.KindExport || !state.Live() {
		return detail
	}
	text := "export to " + exportfmt.Redact(destination)
	if p != nil {
		rows := humanize.Comma(p.Rows)
		if p.Estimate > 0 {
			rows += " of ~" + humanize.Comma(p.Estimate)
		}
		text += fmt.Sprintf(": %s rows, %s, %s", rows, plural(p.Files, "file"), humanize.IBytes(uint64(max(p.Bytes, 0))))
		if p.Worker != "" {
			text += " (on " + p.Worker + ")"
		}
	}
	if cancelling {
		text += "; stopping: cancelled"
	}
	if state == tasks.StateQueued && detail != "" {
		text += "; " + detail // a retry's reason
	}
	return text
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return humanize.Comma(n) + " " + noun + "s"
}
