package remote_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/remote"
)

// renderFacts prints facts the way the facts command does on a host.
func renderFacts(f remote.Facts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "hostname=%s\nos=%s\nkernel=%s\narch=%s\ncpus=%d\nmemkb=%d\n", f.Hostname, f.OS, f.Kernel, f.Arch, f.CPUs, f.MemoryBytes/1024)
	if f.Agent {
		b.WriteString("agent=true\n")
	}
	for _, g := range f.GPUs {
		fmt.Fprintf(&b, "gpu=%s\n", g)
	}
	for _, v := range f.GPUVendors {
		fmt.Fprintf(&b, "gpuvendor=%s\n", v)
	}
	return b.String()
}

// hostValue is what a value becomes on its way through `echo "key=$(cmd)"` and the parser: one line,
// trimmed.
func hostValue(s string) string {
	return strings.TrimSpace(strings.NewReplacer("\n", " ", "\r", " ").Replace(s))
}

func readFactsSeeds(f *testing.F) []string {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "facts", "*.txt"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no facts outputs in testdata/facts: %v", err)
	}
	var outs []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		outs = append(outs, string(b))
	}
	return outs
}

// FuzzFactsRoundTrip: any facts a host can print (one-line trimmed values, counts the API holds) parse
// back to exactly those facts; a CPU or memory figure beyond what the API holds is refused with an error
// that quotes the line.
func FuzzFactsRoundTrip(f *testing.F) {
	for _, out := range readFactsSeeds(f) {
		x, err := remote.ParseFacts(out)
		if err != nil {
			f.Fatalf("seed %q: %v", out, err)
		}
		f.Add(x.Hostname, x.OS, x.Kernel, x.Arch, int64(x.CPUs), x.MemoryBytes/1024, x.Agent, strings.Join(x.GPUs, "\n"))
	}
	f.Add("h", "", "", "", int64(math.MaxInt32)+1, int64(math.MaxInt64/1024)+1, false, "")
	f.Fuzz(func(t *testing.T, hostname, osName, kernel, arch string, cpus, memkb int64, agent bool, gpus string) {
		want := remote.Facts{Hostname: hostValue(hostname), OS: hostValue(osName), Kernel: hostValue(kernel), Arch: hostValue(arch), Agent: agent}
		for _, g := range strings.Split(gpus, "\n") {
			if g = hostValue(g); g != "" && len(want.GPUs) < remote.MaxGPUs {
				want.GPUs = append(want.GPUs, g)
			}
		}
		out := fmt.Sprintf("hostname=%s\nos=%s\nkernel=%s\narch=%s\ncpus=%d\nmemkb=%d\n", want.Hostname, want.OS, want.Kernel, want.Arch, cpus, memkb)
		if agent {
			out += "agent=true\n"
		}
		for _, g := range want.GPUs {
			out += "gpu=" + g + "\n"
		}
		got, err := remote.ParseFacts(out)
		switch {
		case cpus < 0 || cpus > math.MaxInt32:
			if err == nil || !strings.Contains(err.Error(), strconv.Quote(fmt.Sprintf("cpus=%d", cpus))) {
				t.Fatalf("cpus=%d: want an error quoting the line, got %v", cpus, err)
			}
			return
		case memkb < 0 || memkb > math.MaxInt64/1024:
			if err == nil || !strings.Contains(err.Error(), strconv.Quote(fmt.Sprintf("memkb=%d", memkb))) {
				t.Fatalf("memkb=%d: want an error quoting the line, got %v", memkb, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		want.CPUs, want.MemoryBytes = int(cpus), memkb*1024
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q parsed as %+v, want %+v", out, got, want)
		}
		if again := renderFacts(got); again != out {
			t.Fatalf("facts %+v render as %q, the host printed %q", got, again, out)
		}
	})
}

// FuzzParseFactsHostOutput: whatever a host prints (a hostile or broken one included), parsing never
// panics; a refusal quotes the line that is wrong; accepted facts are ones the API can hold (counts in
// range, at most MaxGPUs, one-line trimmed values) and parse back from their rendering unchanged.
func FuzzParseFactsHostOutput(f *testing.F) {
	for _, out := range readFactsSeeds(f) {
		f.Add(out)
		f.Add(strings.ReplaceAll(out, "\n", "\r\n"))
	}
	f.Add("cpus=-1\n")
	f.Add("memkb=9007199254740993\n")
	f.Fuzz(func(t *testing.T, out string) {
		got, err := remote.ParseFacts(out)
		if err != nil {
			quoted := false
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "cpus=") || strings.HasPrefix(l, "memkb=") {
					quoted = quoted || strings.Contains(err.Error(), strconv.Quote(l))
				}
			}
			if !quoted {
				t.Fatalf("%q: the error does not quote the wrong cpus= or memkb= line: %v", out, err)
			}
			return
		}
		if got.CPUs < 0 || got.CPUs > math.MaxInt32 || got.MemoryBytes < 0 || got.MemoryBytes%1024 != 0 || len(got.GPUs) > remote.MaxGPUs || len(got.GPUVendors) > remote.MaxGPUs {
			t.Fatalf("%q: facts %+v are beyond what the API holds", out, got)
		}
		for _, s := range slices.Concat([]string{got.Hostname, got.OS, got.Kernel, got.Arch}, got.GPUs, got.GPUVendors) {
			if s != strings.TrimSpace(s) || strings.Contains(s, "\n") {
				t.Fatalf("%q: value %q is not one trimmed line", out, s)
			}
		}
		again, err := remote.ParseFacts(renderFacts(got))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("%q: facts %+v render and parse back as %+v (%v)", out, got, again, err)
		}
	})
}

// The seeds are real outputs: their facts are what the hosts have.
func TestParseFactsOfRealHosts(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile(filepath.Join("testdata", "facts", "ubuntu-gpu-server.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	got, err := remote.ParseFacts(string(b))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(remote.Facts{Hostname: "gpu-node-07", OS: "Ubuntu 22.04.4 LTS", Kernel: "5.15.0-105-generic", Arch: "x86_64",
		CPUs: 128, MemoryBytes: 1056375324 * 1024, Agent: true, GPUs: []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"}}))

	// Printed on a VM with an NVIDIA H200 passed through (driver 580.159.04, 2026-12-04) by the facts
	// command of that morning, which named GPUs through nvidia-smi alone and printed no gpuvendor= lines.
	b, err = os.ReadFile(filepath.Join("testdata", "facts", "h200-vm.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	got, err = remote.ParseFacts(string(b))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(remote.Facts{Hostname: "vm", OS: "Ubuntu 24.04.3 LTS", Kernel: "6.18.44-fc-v1252-gpu", Arch: "x86_64",
		CPUs: 16, MemoryBytes: 131961976 * 1024, GPUs: []string{"NVIDIA H200"}}))

	b, err = os.ReadFile(filepath.Join("testdata", "facts", "minimal-no-os-release.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	got, err = remote.ParseFacts(string(b))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(remote.Facts{Hostname: "localhost", Kernel: "6.6.30-0-lts", Arch: "x86_64", CPUs: 1}), "an empty MemTotal is unknown, not an error")

	_, err = remote.ParseFacts("hostname=h\ncpus=eight\n")
	g.Expect(err).To(MatchError(`host reported "cpus=eight": the CPU count is not a whole number from 0 to 2147483647`))
	_, err = remote.ParseFacts("memkb=-4\n")
	g.Expect(err).To(MatchError(`host reported "memkb=-4": MemTotal in kB is not a whole number from 0 to 9007199254740991`))
}
