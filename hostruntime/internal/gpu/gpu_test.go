package gpu

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

type pciDev struct{ addr, vendor, class, device string }

func tree(t *testing.T, devs []pciDev, nodes []string) Roots {
	t.Helper()
	r := Roots{Sys: t.TempDir(), Dev: t.TempDir()}
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
	}{
		{
			name:  "no GPU: a NVIDIA audio function and an Intel VGA are ignored",
			devs:  []pciDev{{"0000:00:02.0", "0x8086", "0x030000", "0x3e92"}, {"0000:01:00.1", "0x10de", "0x040300", "0x10fa"}},
			nodes: []string{"dri", "null"},
		},
		{
			name:       "two NVIDIA GPUs with their device nodes",
			devs:       []pciDev{{"0000:3b:00.0", "0x10de", "0x030200", "0x20b0"}, {"0000:86:00.0", "0x10DE", "0x030200", "0x20b0"}, {"0000:00:1f.0", "0x8086", "0x060100", "0xa1c1"}},
			nodes:      []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "kfd", "null"},
			wantLabels: map[string]string{LabelPresent: "true", LabelVendor: "nvidia", LabelCount: "2", LabelNVIDIAPresent: "true"},
			wantNodes:  []string{"nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl"},
		},
		{
			name:       "AMD GPU binds kfd and dri",
			devs:       []pciDev{{"0000:03:00.0", "0x1002", "0x030000", "0x73bf"}},
			nodes:      []string{"kfd", "dri", "nvidia0"},
			wantLabels: map[string]string{LabelPresent: "true", LabelVendor: "amd", LabelCount: "1"},
			wantNodes:  []string{"dri", "kfd"},
		},
		{
			name:       "mixed vendors",
			devs:       []pciDev{{"0000:03:00.0", "0x1002", "0x038000", "0x740c"}, {"0000:04:00.0", "0x10de", "0x030000", "0x2204"}},
			nodes:      []string{"kfd", "nvidia0"},
			wantLabels: map[string]string{LabelPresent: "true", LabelVendor: "mixed", LabelCount: "2", LabelNVIDIAPresent: "true"},
			wantNodes:  []string{"kfd", "nvidia0"},
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
		})
	}
}

func TestDetectWithoutPCIBus(t *testing.T) {
	g := NewWithT(t)
	res, err := Detect(Roots{Sys: t.TempDir(), Dev: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Devices).To(BeEmpty())
}
