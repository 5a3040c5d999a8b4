package devcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"
)

// waitDelay bounds how long Wait keeps reading a child's output after it exited
// (a grandchild holding the pipe open must not hang the shutdown).
const waitDelay = 2 * time.Second

// Process is one child process of the cluster: a master or a worker.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	err     error // set before done closes
}

// processConfig says how to start a child.
type processConfig struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string
	// echo receives the child's log lines that pass filter, prefixed with name.
	echo   *Console
	filter LineFilter
}

// startProcess starts a child whose output (stdout and stderr) is appended to
// its log file and echoed, filtered, to the console.
func startProcess(pc processConfig) (*Process, error) {
	f, err := os.OpenFile(pc.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", pc.name, err)
	}
	fmt.Fprintf(f, "----- %s %s: %s %v -----\n", time.Now().UTC().Format(time.RFC3339), pc.name, pc.path, pc.args)
	out := &lineWriter{name: pc.name, file: f, echo: pc.echo, filter: pc.filter}
	cmd := exec.Command(pc.path, pc.args...)
	cmd.Env = pc.env
	cmd.Stdout = out // one writer for both: exec copies them through one pipe
	cmd.Stderr = out
	cmd.SysProcAttr = childAttr()
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s: start %s: %w", pc.name, pc.path, err)
	}
	p := &Process{name: pc.name, logPath: pc.logPath, cmd: cmd, logFile: f, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		out.flush()
		_ = f.Close()
		p.err = err
		close(p.done)
	}()
	return p, nil
}

// Name is the child's name in the cluster (master, w1, ...).
func (p *Process) Name() string { return p.name }

// Pid is the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file the child's output goes to.
func (p *Process) LogPath() string { return p.logPath }

// Done is closed when the child has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the child exited (nil for status 0); valid after Done.
func (p *Process) Err() error { return p.err }

// Stop asks the child to shut down (SIGTERM), waits up to timeout, then kills it.
// It returns how the child exited; a child killed after the timeout is an error
// that says so.
func (p *Process) Stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	if err := terminate(p.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = p.cmd.Process.Kill()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed (log %s)", p.name, timeout, p.logPath)
}

// lineWriter splits a child's output into lines: each goes to the log file, and
// to the console if the filter passes it. exec writes from one goroutine.
type lineWriter struct {
	name   string
	file   io.Writer
	echo   *Console
	filter LineFilter
	buf    []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<20 { // a "line" this long is written as it is
		w.line(w.buf)
		w.buf = nil
	}
	return len(b), nil
}

// flush writes a last line that had no newline.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.line(w.buf)
		w.buf = nil
	}
}

func (w *lineWriter) line(l []byte) {
	_, _ = w.file.Write(append(l, '\n'))
	if w.echo == nil {
		return
	}
	if text, ok := w.filter.Render(l); ok && !w.echo.said(text) {
		w.echo.Line(w.name, text)
	}
}

// Console is the terminal the cluster reports to: the banner, task events and
// the children's echoed log lines, one whole line at a time.
type Console struct {
	mu  sync.Mutex
	out io.Writer
	// own are the texts master dev logged itself (Logger): a child's line that
	// says the same (every process warns about the same environment) is not
	// echoed again.
	own map[string]bool
}

// NewConsole returns a console writing to out.
func NewConsole(out io.Writer) *Console { return &Console{out: out} }

// Line writes one line prefixed with a name column.
func (c *Console) Line(name, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.out, "%-6s | %s\n", name, text)
}

// Logger returns a logger whose records are console lines of name, rendered as
// the children's echoed log lines are (LineFilter): master dev's own warnings
// read like the children's, and a child's line that repeats one is not echoed
// (it stays in the child's log).
func (c *Console) Logger(name string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(&ownLines{c: c, name: name}, nil))
}

// ownLines writes master dev's own log records to the console and remembers
// them. slog's handler writes one whole record at a time.
type ownLines struct {
	c    *Console
	name string
}

func (o *ownLines) Write(b []byte) (int, error) {
	text, ok := LineFilter{Level: slog.LevelDebug}.Render(bytes.TrimRight(b, "\n"))
	if ok {
		o.c.mu.Lock()
		if o.c.own == nil {
			o.c.own = map[string]bool{}
		}
		o.c.own[text] = true
		o.c.mu.Unlock()
		o.c.Line(o.name, text)
	}
	return len(b), nil
}

// said reports whether master dev logged text itself.
func (c *Console) said(text string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.own[text]
}

// Printf writes text as it is.
func (c *Console) Printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.out, format, args...)
}
