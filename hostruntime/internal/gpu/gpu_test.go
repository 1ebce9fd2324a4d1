package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/validation"
)

// pciDev is a PCI function in a synthetic sysfs tree; driver "" binds none, model "" writes no NVIDIA
// driver information file.
type pciDev struct{ addr, vendor, class, device, driver, model string }

func tree(t *testing.T, devs []pciDev, nodes []string) Roots {
	t.Helper()
	r := Roots{Sys: t.TempDir(), Dev: t.TempDir(), Proc: t.TempDir()}
	for _, d := range devs {
		dir := filepath.Join(r.Sys, "bus", "pci", "devices", d.addr)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, v := range map[string]string{"vendor": d.vendor, "class": d.class, "device": d.device} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if d.driver != "" {
			// As sysfs links it: ../../../bus/pci/drivers/<name>.
			if err := os.Symlink("../../../bus/pci/drivers/"+d.driver, filepath.Join(dir, "driver")); err != nil {
				t.Fatal(err)
			}
		}
		if d.model != "" {
			info := filepath.Join(r.Proc, "driver", "nvidia", "gpus", d.addr)
			if err := os.MkdirAll(info, 0o755); err != nil {
				t.Fatal(err)
			}
			// The layout of the driver's file (tab-aligned "Key: \t value" lines).
			text := "Model: \t\t " + d.model + "\nIRQ:   \t\t 41\nBus Location: \t " + d.addr + "\nDevice Minor: \t 0\n"
			if err := os.WriteFile(filepath.Join(info, "information"), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range nodes {
		p := filepath.Join(r.Dev, n)
		var err error
		if filepath.Ext(n) == "" && n == "dri" {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name       string
		devs       []pciDev
		nodes      []string
		wantLabels map[string]string
		wantNodes  []string
		// wantUnusable are the addresses of GPUs on the bus that containers cannot use.
		wantUnusable []string
	}{
		{
			name:  "no GPU: a NVIDIA audio function and an Intel VGA are ignored",
			devs:  []pciDev{{"0000:00:02.0", "0x8086", "0x030000", "0x3e92", "i915", ""}, {"0000:01:00.1", "0x10de", "0x040300", "0x10fa", "snd_hda_intel", ""}},
			nodes: []string{"dri", "null"},
		},
		{
			// The tree of the H200 this was checked on (docs/agent.md), with a second GPU of the same model.
			name: "two NVIDIA GPUs named by the driver, with their device nodes",
			devs: []pciDev{
				{"0000:3b:00.0", "0x10de", "0x030200", "0x2335", "nvidia", "NVIDIA H200"}, {"0000:86:00.0", "0x10DE", "0x030200", "0x2335", "nvidia", "NVIDIA H200"},
				{"0000:00:1f.0", "0x8086", "0x060100", "0xa1c1", "lpc_ich", ""},
			},
			nodes:      []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps", "kfd", "null"},
			wantLabels: map[string]string{LabelPresent: "true", LabelVendor: "nvidia", LabelCount: "2", LabelNVIDIAPresent: "true", LabelProduct: "NVIDIA-H200"},
			wantNodes:  []string{"nvidia-caps", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "nvidiactl"},
		},
		{
			name: "NVIDIA GPUs of two models are labelled mixed",
			devs: []pciDev{
				{"0000:3b:00.0", "0x10de", "0x030200", "0x2335", "nvidia", "NVIDIA H200"}, {"0000:86:00.0", "0x10de", "0x030200", "0x2330", "nvidia", "NVIDIA H100 80GB HBM3"},
			},
			nodes:      []string{"nvidia0", "nvidia1", "nvidiactl"},
			wantLabels: map[string]string{LabelPresent: "true", LabelVendor: "nvidia", LabelCount: "2", LabelNVIDIAPresent: "true", LabelProduct: "mixed"},
			wantNodes:  []string{"nvidia0", "nvidia1", "nvidiactl"},
		},
		{
			name:       "AMD GPU binds kfd and dri",
			devs:       []pciDev{{"0000:03:00.0", "0x1002", "0x030000", "0x73bf", "amdgpu", ""}},
			nodes:      []string{"kfd", "dri", "nvidia0"},
			wantLabels: map[string]string{LabelPresent: "true", LabelVendor: "amd", LabelCount: "1"},
			wantNodes:  []string{"dri", "kfd"},
		},
		{
			// AMD's Instinct accelerators are processing accelerators (class 0x1200), not display controllers.
			name:       "AMD Instinct accelerators",
			devs:       []pciDev{{"0000:c1:00.0", "0x1002", "0x120000", "0x740c", "amdgpu", ""}, {"0000:c2:00.0", "0x1002", "0x120000", "0x740c", "amdgpu", ""}},
			nodes:      []string{"kfd", "dri"},
			wantLabels: map[string]string{LabelPresent: "true", LabelVendor: "amd", LabelCount: "2"},
			wantNodes:  []string{"dri", "kfd"},
		},
		{
			name:       "mixed vendors",
			devs:       []pciDev{{"0000:03:00.0", "0x1002", "0x038000", "0x740c", "amdgpu", ""}, {"0000:04:00.0", "0x10de", "0x030000", "0x2204", "nvidia", ""}},
			nodes:      []string{"kfd", "nvidia0"},
			wantLabels: map[string]string{LabelPresent: "true", LabelVendor: "mixed", LabelCount: "2", LabelNVIDIAPresent: "true"},
			wantNodes:  []string{"kfd", "nvidia0"},
		},
		{
			// Kept for a VM (vfio-pci), driven by nouveau, or with no driver: nothing a container can
			// open, so no labels that would draw GPU workloads, and no device nodes.
			name: "GPUs without their compute driver are left out",
			devs: []pciDev{
				{"0000:3b:00.0", "0x10de", "0x030200", "0x2335", "vfio-pci", ""}, {"0000:3c:00.0", "0x10de", "0x030000", "0x1eb8", "nouveau", ""},
				{"0000:03:00.0", "0x1002", "0x030000", "0x73bf", "", ""},
			},
			nodes:        []string{"vfio", "dri", "kfd"},
			wantUnusable: []string{"0000:03:00.0", "0000:3b:00.0", "0000:3c:00.0"},
		},
		{
			name: "one GPU of two kept for a VM",
			devs: []pciDev{
				{"0000:3b:00.0", "0x10de", "0x030200", "0x2335", "vfio-pci", ""}, {"0000:86:00.0", "0x10de", "0x030200", "0x2335", "nvidia", "NVIDIA H200"},
			},
			nodes:        []string{"nvidia0", "nvidiactl", "vfio"},
			wantLabels:   map[string]string{LabelPresent: "true", LabelVendor: "nvidia", LabelCount: "1", LabelNVIDIAPresent: "true", LabelProduct: "NVIDIA-H200"},
			wantNodes:    []string{"nvidia0", "nvidiactl"},
			wantUnusable: []string{"0000:3b:00.0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res, err := Detect(tree(t, tc.devs, tc.nodes))
			g.Expect(err).NotTo(HaveOccurred())
			if tc.wantLabels == nil {
				g.Expect(res.Labels()).To(BeEmpty())
			} else {
				g.Expect(res.Labels()).To(Equal(tc.wantLabels))
			}
			if tc.wantNodes == nil {
				g.Expect(res.DeviceNodes).To(BeEmpty())
			} else {
				g.Expect(res.DeviceNodes).To(Equal(tc.wantNodes))
			}
			var unusable []string
			for _, d := range res.Unusable {
				unusable = append(unusable, d.Address)
			}
			g.Expect(unusable).To(Equal(tc.wantUnusable))
		})
	}
}

func TestDetectWithoutPCIBus(t *testing.T) {
	g := NewWithT(t)
	res, err := Detect(Roots{Sys: t.TempDir(), Dev: t.TempDir(), Proc: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Devices).To(BeEmpty())
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H200":                  "NVIDIA-H200",
		"NVIDIA H100 80GB HBM3":        "NVIDIA-H100-80GB-HBM3",
		"NVIDIA GeForce RTX 4090 ":     "NVIDIA-GeForce-RTX-4090",
		" (A100) / PCIe":               "A100-PCIe",
		"Tesla T4":                     "Tesla-T4",
		strings.Repeat("x", 70):        strings.Repeat("x", 63),
		strings.Repeat("x", 62) + " y": strings.Repeat("x", 62),
		"###":                          "",
	} {
		g := NewWithT(t)
		got := LabelValue(in)
		g.Expect(got).To(Equal(want), in)
		g.Expect(validation.IsValidLabelValue(got)).To(BeEmpty(), in)
	}
}

// Detect on this machine's own /sys, /dev and /proc agrees with what the NVIDIA driver itself says it
// drives: nvidia-smi's list when the tool is installed, else the driver's /proc/driver/nvidia/gpus. Every
// GPU the driver drives is found, usable, named as the driver names it, with its /dev/nvidia<minor> to
// bind. On a machine without the driver (the CI machines) the driver drives nothing, and Detect finds
// no usable NVIDIA GPU. Run on an NVIDIA H200 (docs/agent.md has the figures).
func TestDetectOnThisHostAgreesWithTheNVIDIADriver(t *testing.T) {
	g := NewWithT(t)
	res, err := Detect(Roots{})
	g.Expect(err).NotTo(HaveOccurred())
	got := map[string]string{}
	for _, d := range res.Devices {
		if d.Vendor == "nvidia" {
			got[d.Address] = d.Model
		}
	}
	want := driverGPUs(t)
	t.Logf("the NVIDIA driver drives %v; Detect found %v, labels %v, device nodes %v", want, got, res.Labels(), res.DeviceNodes)
	g.Expect(got).To(Equal(want))
	for addr := range want {
		minor := driverInfo(t, addr, "Device Minor")
		g.Expect(res.DeviceNodes).To(ContainElements("nvidia"+minor, "nvidiactl"), addr)
	}
	if len(want) > 0 {
		g.Expect(res.Labels()).To(HaveKeyWithValue(LabelNVIDIAPresent, "true"))
		g.Expect(res.Labels()).To(HaveKeyWithValue(LabelCount, strconv.Itoa(res.Count(""))))
	}
}

// driverGPUs is the NVIDIA driver's own list of the GPUs it drives, PCI address → model: from nvidia-smi
// when installed (a separate program that asks the driver), else from /proc/driver/nvidia/gpus.
func driverGPUs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	if _, err := exec.LookPath("nvidia-smi"); err == nil {
		b, err := exec.Command("nvidia-smi", "--query-gpu=pci.bus_id,name", "--format=csv,noheader").Output()
		if err != nil {
			t.Fatalf("nvidia-smi is installed but failed: %v", err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			id, name, ok := strings.Cut(l, ",")
			if !ok {
				continue
			}
			// nvidia-smi writes the domain with 8 digits (00000000:00:06.0), sysfs with 4.
			id = strings.ToLower(strings.TrimSpace(id))
			if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) == 8 {
				id = dom[4:] + ":" + rest
			}
			out[id] = strings.TrimSpace(name)
		}
		return out
	}
	entries, err := os.ReadDir("/proc/driver/nvidia/gpus")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		out[e.Name()] = driverInfo(t, e.Name(), "Model")
	}
	return out
}

// driverInfo is one field of the driver's information file for the GPU at addr.
func driverInfo(t *testing.T, addr, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc/driver/nvidia/gpus", addr, "information"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %q in the driver's information for %s", key, addr)
	return ""
}
