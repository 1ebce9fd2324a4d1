package redfishsim_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/redfishsim"
)

// A system's disk is created sparse at its size (nothing allocated until written), an existing file is
// kept as it is — a test may have written an image into it — and a serial virtio-blk would truncate or a
// path QEMU's option syntax would split is refused when the system is added, not at power-on.
func TestQEMUDriverDisks(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	d := redfishsim.NewQEMUDriver(filepath.Join(dir, "vms"))

	fresh := filepath.Join(dir, "fresh.raw")
	g.Expect(d.Add(ctx, "vm0", redfishsim.QEMUSystem{Tap: "unused0", MAC: "52:54:00:00:00:01", Disk: fresh})).To(Succeed())
	g.Expect(d.DiskPath("vm0")).To(Equal(fresh))
	st, err := os.Stat(fresh)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Size()).To(Equal(int64(redfishsim.DefaultDiskSizeBytes)))
	g.Expect(st.Sys().(*syscall.Stat_t).Blocks).To(BeNumerically("<", 64), "sparse: no data blocks allocated")

	kept := filepath.Join(dir, "kept.raw")
	g.Expect(os.WriteFile(kept, []byte("an image"), 0o600)).To(Succeed())
	g.Expect(d.Add(ctx, "vm1", redfishsim.QEMUSystem{Tap: "unused1", MAC: "52:54:00:00:00:02", Disk: kept, DiskSizeBytes: 1 << 30})).To(Succeed())
	g.Expect(os.ReadFile(kept)).To(Equal([]byte("an image")))

	g.Expect(d.Add(ctx, "vm2", redfishsim.QEMUSystem{Tap: "unused2", MAC: "52:54:00:00:00:03"})).To(Succeed())
	g.Expect(d.DiskPath("vm2")).To(BeEmpty(), "no disk unless asked for")

	for _, bad := range []redfishsim.QEMUSystem{
		{Disk: filepath.Join(dir, "a.raw"), DiskSerial: "a-serial-longer-than-20"},
		{Disk: filepath.Join(dir, "b.raw"), DiskSerial: "with,comma"},
		{Disk: filepath.Join(dir, "c.raw"), DiskSizeBytes: 1000},
		{Disk: filepath.Join(dir, "d,e.raw")},
	} {
		bad.Tap, bad.MAC = "unused3", "52:54:00:00:00:04"
		g.Expect(d.Add(ctx, "bad", bad)).To(HaveOccurred(), "%+v", bad)
		_, err := os.Stat(bad.Disk)
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "no file for a refused disk %s", bad.Disk)
	}
}

// The emulator hands a one-time "Hdd" override to the driver and then falls back to the normal boot
// order; an unknown target is still refused.
func TestBootOverrideHddReachesTheDriver(t *testing.T) {
	g := NewWithT(t)
	drv := redfishsim.NewMemoryDriver()
	sim, err := redfishsim.Start(redfishsim.Options{Username: "admin", Password: "pw", Driver: drv, Plain: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(sim.Close)
	sim.AddSystem(redfishsim.DefaultSystem("vm0", "52:54:00:00:00:01"))
	do := func(method, path, body string) (int, string) {
		req, err := http.NewRequestWithContext(context.Background(), method, "http://"+sim.Host()+"/redfish/v1/Systems/vm0"+path, strings.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		req.SetBasicAuth("admin", "pw")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return resp.StatusCode, string(b)
	}
	code, body := do(http.MethodPatch, "", `{"Boot": {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "Hdd"}}`)
	g.Expect(code).To(Equal(http.StatusNoContent), body)
	code, body = do(http.MethodPost, "/Actions/ComputerSystem.Reset", `{"ResetType": "On"}`)
	g.Expect(code).To(Equal(http.StatusNoContent), body)
	code, body = do(http.MethodPost, "/Actions/ComputerSystem.Reset", `{"ResetType": "ForceRestart"}`)
	g.Expect(code).To(Equal(http.StatusNoContent), body)
	g.Expect(drv.Boots("vm0")).To(Equal([]string{"Hdd", ""}), "the override applied once")

	code, body = do(http.MethodPatch, "", `{"Boot": {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "Floppy"}}`)
	g.Expect(code).To(Equal(http.StatusBadRequest))
	g.Expect(body).To(And(ContainSubstring("PropertyValueNotInList"), ContainSubstring(`Floppy`)), "Floppy is not among the system's AllowableValues")
}
