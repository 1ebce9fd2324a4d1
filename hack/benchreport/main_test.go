package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot
cpu: AMD EPYC
BenchmarkTFTPVersusTFTPDHPA-2   	       1	2487124126 ns/op	       116.6 MiB/s	        25.70 baseline-MiB/s	      1900 baseline-p50-ms	       433.6 p50-ms	         4.538 x-baseline
BenchmarkHTTPVersusNginx/ranges-1MiB-2         	       1	8262568419 ns/op	       611.6 MiB/s	       760.1 baseline-MiB/s	         0.8047 x-baseline
BenchmarkDHCPPerfdhcpVersusKea-2 	       1	1 ns/op	 30000 kea-offers/s	 0.5 yonder-avg-ms	 42000 yonder-offers/s	 1.4 yonder/kea
--- FAIL: BenchmarkDHCPDiscoverOffer
    bench_test.go:12: lost offers
PASS
pkg: github.com/yonder-dev/yonder/test/hosts
BenchmarkHostStartup 	       1	  52 ns/op	 50 baseline-ms/netns	 200 ms/host	 4.0 x-baseline
BenchmarkRegisterInspect1000-2 	 1	 1 ns/op	 38 redfish-req/host	 90 s-to-available	 30 s-baseline	 3 x-baseline
BenchmarkOdd-2 	 1	 1 ns/op	 7 widgets
ok  	github.com/yonder-dev/yonder/test/hosts	1.0s
FAIL	github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot	3.1s
# github.com/yonder-dev/yonder/network/x
FAIL	github.com/yonder-dev/yonder/network/x [build failed]
`

func TestParse(t *testing.T) {
	g := NewWithT(t)
	res, err := Parse(strings.NewReader(sample))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.CPU).To(Equal("AMD EPYC"))
	g.Expect(res.Benches).To(HaveLen(8))
	g.Expect(res.Benches[0]).To(Equal(Bench{Pkg: "github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot",
		Name: "TFTPVersusTFTPDHPA", Procs: 2, Metrics: []Metric{{2487124126, "ns/op"}, {116.6, "MiB/s"}, {25.70, "baseline-MiB/s"},
			{1900, "baseline-p50-ms"}, {433.6, "p50-ms"}, {4.538, "x-baseline"}}}))
	g.Expect(res.Benches[1].Name).To(Equal("HTTPVersusNginx/ranges-1MiB"))
	g.Expect(res.Benches[3]).To(Equal(Bench{Pkg: "github.com/yonder-dev/yonder/infrastructure-baremetal/internal/netboot", Name: "DHCPDiscoverOffer", Failed: true}))
	g.Expect(res.Benches[4].Pkg).To(Equal("github.com/yonder-dev/yonder/test/hosts"))
	g.Expect(res.Benches[4].Procs).To(Equal(0)) // GOMAXPROCS=1 prints no suffix
	// netboot's FAIL line adds nothing (its failed benchmark has a row); a build failure gets one.
	g.Expect(res.Benches[7]).To(Equal(Bench{Pkg: "github.com/yonder-dev/yonder/network/x", Name: "(package)", Failed: true}))
}

// TestParseJSON: test2json events give the same results as the plain lines.
func TestParseJSON(t *testing.T) {
	g := NewWithT(t)
	var js strings.Builder
	for _, l := range strings.SplitAfter(sample, "\n") {
		if l == "" {
			continue
		}
		b, _ := json.Marshal(map[string]string{"Action": "output", "Output": l})
		js.Write(append(b, '\n'))
	}
	plain, err := Parse(strings.NewReader(sample))
	g.Expect(err).NotTo(HaveOccurred())
	viaJSON, err := Parse(strings.NewReader(js.String()))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(viaJSON).To(Equal(plain))
}

func TestRows(t *testing.T) {
	g := NewWithT(t)
	res, err := Parse(strings.NewReader(sample))
	g.Expect(err).NotTo(HaveOccurred())
	rows := Rows(res)
	g.Expect(rows).To(HaveLen(8))
	g.Expect(rows[0]).To(Equal(Row{Scenario: "TFTPVersusTFTPDHPA (infrastructure-baremetal/internal/netboot)",
		Figure: "116.6 MiB/s", Baseline: "25.7 baseline-MiB/s", Ratio: "4.538 x-baseline",
		Goal: goals["TFTPVersusTFTPDHPA"].Text, Status: "met", Other: []string{"1900 baseline-p50-ms", "433.6 p50-ms"}}))
	// A sub-benchmark inherits its parent's goal; 0.80 misses ≥ 1.0.
	g.Expect(rows[1].Goal).To(Equal(goals["HTTPVersusNginx"].Text))
	g.Expect(rows[1].Status).To(Equal("MISSED (x-baseline ≥ 1)"))
	// Units outside the convention are mapped by the goal table.
	g.Expect(rows[2].Figure).To(Equal("4.2e+04 yonder-offers/s"))
	g.Expect(rows[2].Baseline).To(Equal("3e+04 kea-offers/s"))
	g.Expect(rows[2].Ratio).To(Equal("1.4 yonder/kea"))
	g.Expect(rows[2].Status).To(Equal("met"))
	g.Expect(rows[2].Other).To(Equal([]string{"0.5 yonder-avg-ms"}))
	g.Expect(rows[3].Status).To(Equal("FAILED"))
	g.Expect(rows[4].Figure).To(Equal("200 ms/host"))
	g.Expect(rows[4].Baseline).To(Equal("50 baseline-ms/netns"))
	g.Expect(rows[4].Ratio).To(Equal("4 x-baseline"))
	g.Expect(rows[5].Status).To(Equal("MISSED (redfish-req/host ≤ 14)"))
	g.Expect(rows[5].Figure).To(Equal("90 s-to-available"))
	g.Expect(rows[5].Baseline).To(Equal("30 s-baseline"))
	g.Expect(rows[6]).To(Equal(Row{Scenario: "Odd (test/hosts)", Figure: "7 widgets", Status: "—"}))
}

func TestRender(t *testing.T) {
	g := NewWithT(t)
	res, err := Parse(strings.NewReader(sample))
	g.Expect(err).NotTo(HaveOccurred())
	out := Render(res, Machine{Cores: 2, Kernel: "6.18.0", CPU: "AMD EPYC", GoVersion: "go1.26.8", GOS: "linux/amd64"},
		time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC))
	g.Expect(out).To(HavePrefix("# Benchmark report\n\nWritten by `make bench` at 2026-12-01T18:00:00Z on 2 cores, kernel 6.18.0, AMD EPYC (go1.26.8, linux/amd64).\n"))
	g.Expect(out).To(ContainSubstring("| scenario | figure | baseline | ratio | goal | status | other metrics | machine |\n"))
	g.Expect(out).To(ContainSubstring("| TFTPVersusTFTPDHPA (infrastructure-baremetal/internal/netboot) | 116.6 MiB/s | 25.7 baseline-MiB/s | 4.538 x-baseline | " +
		goals["TFTPVersusTFTPDHPA"].Text + " | met | 1900 baseline-p50-ms, 433.6 p50-ms | 2 cores, kernel 6.18.0, AMD EPYC |\n"))
	g.Expect(strings.Count(out, "\n| ")).To(Equal(9)) // header + 8 rows
	g.Expect(out).To(ContainSubstring("| (package) (network/x) | failed: see the benchmark output |"))
	empty := Render(Results{}, Machine{}, time.Time{})
	g.Expect(empty).To(ContainSubstring("| (no benchmark results in the input) |"))
}
