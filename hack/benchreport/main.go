// Command benchreport turns `go test -bench` output into the benchmark report `make bench` writes
// (out/bench/report.md): one row per benchmark (sub-benchmarks included) with its figure, the baseline
// measured in the same run, their ratio, the goal from issue 21 and whether it is met, the other metrics,
// and the machine it ran on. It reads the plain output lines (or `go test -json`'s Output fields).
//
// Units follow one convention: a benchmark reports its figure in some unit U, the baseline as
// "baseline-U" (or "U-baseline"), and the ratio as "x-baseline". Benchmarks that name their units
// otherwise are mapped in goals below.
//
//	go run ./hack/benchreport -o out/bench/report.md out/bench/bench.txt
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	out := flag.String("o", "", "write the report here (default: stdout)")
	flag.Parse()
	var in io.Reader = os.Stdin
	if flag.NArg() > 0 {
		var readers []io.Reader
		for _, p := range flag.Args() {
			f, err := os.Open(p) //nolint:gosec // the operator names the input files
			if err != nil {
				fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
				os.Exit(1)
			}
			defer func() { _ = f.Close() }()
			readers = append(readers, f)
		}
		in = io.MultiReader(readers...)
	}
	res, err := Parse(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: failed to read the benchmark output: %v\n", err)
		os.Exit(1)
	}
	report := Render(res, LocalMachine(res.CPU), time.Now().UTC())
	if *out == "" {
		fmt.Print(report)
		return
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o750); err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, []byte(report), 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
		os.Exit(1)
	}
}

// Metric is one reported value.
type Metric struct {
	Value float64
	Unit  string
}

// Bench is one benchmark result line (or a benchmark that failed: Failed, no metrics).
type Bench struct {
	Pkg, Name string // Name without "Benchmark" and the -GOMAXPROCS suffix, e.g. "TFTPVersusTFTPDHPA"
	Procs     int
	Metrics   []Metric
	Failed    bool
}

// Results are everything read from one run.
type Results struct {
	CPU     string
	Benches []Bench
}

func (r Results) failedIn(pkg string) bool {
	for _, b := range r.Benches {
		if b.Pkg == pkg && b.Failed {
			return true
		}
	}
	return false
}

// Parse reads `go test -bench` output: plain lines or test2json events.
func Parse(r io.Reader) (Results, error) {
	var res Results
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "{") {
			var ev struct{ Action, Package, Output string }
			if json.Unmarshal([]byte(line), &ev) == nil {
				if ev.Action != "output" {
					continue
				}
				line = strings.TrimSuffix(ev.Output, "\n")
				if ev.Package != "" {
					pkg = ev.Package
				}
			}
		}
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(line, "pkg: ")
		case strings.HasPrefix(line, "cpu: "):
			res.CPU = strings.TrimPrefix(line, "cpu: ")
		case strings.HasPrefix(strings.TrimSpace(line), "--- FAIL: Benchmark"):
			name := strings.Fields(strings.TrimSpace(line))[2]
			res.Benches = append(res.Benches, Bench{Pkg: pkg, Name: strings.TrimPrefix(name, "Benchmark"), Failed: true})
		case strings.HasPrefix(line, "FAIL\t"):
			// A package that failed outside any benchmark (build failure, TestMain, panic): one row says so.
			p := strings.Fields(line)[1]
			if !res.failedIn(p) {
				res.Benches = append(res.Benches, Bench{Pkg: p, Name: "(package)", Failed: true})
			}
		case strings.HasPrefix(line, "Benchmark"):
			if b, ok := parseLine(pkg, line); ok {
				res.Benches = append(res.Benches, b)
			}
		}
	}
	return res, sc.Err()
}

// parseLine parses "BenchmarkX/sub-2   1   123 ns/op   4.5 MiB/s …".
func parseLine(pkg, line string) (Bench, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return Bench{}, false
	}
	if _, err := strconv.Atoi(f[1]); err != nil {
		return Bench{}, false
	}
	b := Bench{Pkg: pkg, Name: strings.TrimPrefix(f[0], "Benchmark")}
	if i := strings.LastIndex(b.Name, "-"); i > 0 {
		if p, err := strconv.Atoi(b.Name[i+1:]); err == nil {
			b.Name, b.Procs = b.Name[:i], p
		}
	}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return Bench{}, false
		}
		b.Metrics = append(b.Metrics, Metric{v, f[i+1]})
	}
	return b, true
}

// Machine is where the run happened.
type Machine struct {
	Cores          int
	Kernel, CPU    string
	GoVersion, GOS string
}

// LocalMachine describes this machine (the report is written where the benchmarks ran); cpu is go test's
// "cpu:" line, used when /proc/cpuinfo names no model.
func LocalMachine(cpu string) Machine {
	m := Machine{Cores: runtime.NumCPU(), CPU: cpu, GoVersion: runtime.Version(), GOS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// Row is one line of the report.
type Row struct {
	Scenario                string
	Figure, Baseline, Ratio string
	Goal, Status            string
	Other                   []string
}

// Rows applies the unit convention and the goals to every benchmark.
func Rows(res Results) []Row {
	rows := make([]Row, 0, len(res.Benches))
	for _, b := range res.Benches {
		g := goalFor(b.Name)
		r := Row{Scenario: b.Name + " (" + shortPkg(b.Pkg) + ")", Goal: g.Text, Status: "—"}
		if b.Failed {
			r.Status, r.Figure = "FAILED", "failed: see the benchmark output"
			rows = append(rows, r)
			continue
		}
		byUnit := map[string]float64{}
		for _, m := range b.Metrics {
			byUnit[m.Unit] = m.Value
		}
		used := map[string]bool{"ns/op": true}
		pick := func(unit string) string {
			if v, ok := byUnit[unit]; ok && unit != "" {
				used[unit] = true
				return formatMetric(v, unit)
			}
			return ""
		}
		fig, base, ratio := g.Figure, g.Baseline, g.Ratio
		if ratio == "" {
			ratio = "x-baseline"
		}
		if base == "" || fig == "" {
			for _, m := range b.Metrics {
				u, ok := strings.CutPrefix(m.Unit, "baseline-")
				if !ok {
					u, ok = strings.CutSuffix(m.Unit, "-baseline")
				}
				if ok && u != "x" && m.Unit != ratio {
					if _, has := byUnit[u]; has {
						fig, base = u, m.Unit
						break
					}
				}
			}
		}
		r.Figure, r.Baseline, r.Ratio = pick(fig), pick(base), pick(ratio)
		if r.Figure == "" { // no convention, no mapping: the first metric other than the run's wall time
			m := b.Metrics[0]
			if len(b.Metrics) > 1 && m.Unit == "ns/op" {
				m = b.Metrics[1]
			}
			r.Figure, used[m.Unit] = formatMetric(m.Value, m.Unit), true
		}
		for _, m := range b.Metrics {
			if !used[m.Unit] {
				r.Other = append(r.Other, formatMetric(m.Value, m.Unit))
			}
		}
		r.Status = g.status(byUnit)
		rows = append(rows, r)
	}
	return rows
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "github.com/yonder-dev/yonder/") }

func formatMetric(v float64, unit string) string {
	return strconv.FormatFloat(v, 'g', 4, 64) + " " + unit
}

// Render writes the report.
func Render(res Results, m Machine, at time.Time) string {
	var b strings.Builder
	machine := fmt.Sprintf("%d cores, kernel %s, %s", m.Cores, m.Kernel, m.CPU)
	fmt.Fprintf(&b, "# Benchmark report\n\nWritten by `make bench` at %s on %s (%s, %s).\n\n", at.Format(time.RFC3339), machine, m.GoVersion, m.GOS)
	b.WriteString("Each row is one benchmark run once (`-benchtime 1x`): its figure, the baseline measured in the same run,\n" +
		"their ratio (`x-baseline`: figure ÷ baseline), the goal (issue 21) and whether this run met it. Throughput\n" +
		"ratios above 1 are better than the baseline; time ratios below 1 are. Single runs on a shared machine are\n" +
		"noisy: compare ratios, not absolute figures, and rerun a row with `make bench BENCH=<name>`.\n\n")
	b.WriteString("| scenario | figure | baseline | ratio | goal | status | other metrics | machine |\n|---|---|---|---|---|---|---|---|\n")
	rows := Rows(res)
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", esc(r.Scenario), esc(r.Figure), esc(r.Baseline), esc(r.Ratio),
			esc(r.Goal), r.Status, esc(strings.Join(r.Other, ", ")), esc(machine))
	}
	if len(rows) == 0 {
		b.WriteString("| (no benchmark results in the input) | | | | | | | |\n")
	}
	return b.String()
}

func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
