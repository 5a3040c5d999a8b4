package mdreport

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes where a run happened: figures from a 2-core CI box and a
// workstation are not comparable, so every generated section names its machine.
type Machine struct {
	CPUs     int
	Model    string
	MemBytes int64
	Kernel   string
	Go       string
	LoadAvg  string // 1, 5 and 15 minute load averages at the start
}

// ThisMachine reads the machine's description from /proc (fields it cannot read
// stay empty).
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	m.Model = procField("/proc/cpuinfo", "model name", ":")
	if v := procField("/proc/meminfo", "MemTotal", ":"); v != "" {
		kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, "kB")), 10, 64)
		m.MemBytes = kb << 10
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

func (m Machine) String() string {
	return fmt.Sprintf("%d CPUs (%s), %s memory, %s, %s; load average %s at the start",
		m.CPUs, orUnknown(m.Model), gib(m.MemBytes), orUnknown(m.Kernel), m.Go, orUnknown(m.LoadAvg))
}

// gib prints a machine's memory.
func gib(n int64) string {
	if n <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func orUnknown(s string) string { return cmp.Or(s, "unknown") }

// procField returns the value of the first "key<sep> value" line of a /proc file.
func procField(path, key, sep string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), sep)
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
