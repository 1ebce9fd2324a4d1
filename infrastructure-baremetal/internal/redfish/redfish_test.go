package redfish_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in, endpoint, path, err string
	}{
		{in: "redfish://10.0.0.1/redfish/v1/Systems/1", endpoint: "https://10.0.0.1", path: "/redfish/v1/Systems/1"},
		{in: "redfish+https://bmc:8443/redfish/v1/Systems/abc/", endpoint: "https://bmc:8443", path: "/redfish/v1/Systems/abc"},
		{in: "redfish+http://bmc:8000", endpoint: "http://bmc:8000"},
		{in: "ipmi://10.0.0.1", err: `driver "ipmi" is not supported`},
		{in: "redfish:///redfish/v1/Systems/1", err: "has no host"},
		{in: "redfish://bmc/redfish/v1/Chassis/1", err: "is not a Redfish ComputerSystem"},
		{in: "redfish://admin:pw@bmc/redfish/v1/Systems/1", err: "carries credentials"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			g := NewWithT(t)
			a, err := redfish.ParseAddress(tc.in)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Endpoint).To(Equal(tc.endpoint))
			g.Expect(a.SystemPath).To(Equal(tc.path))
		})
	}
}

func startSim(t *testing.T) *redfishsim.Server {
	t.Helper()
	sim, err := redfishsim.Start(redfishsim.Options{Username: "admin", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	spec := redfishsim.DefaultSystem("node-1", "52:54:00:AA:00:01")
	spec.GPUs = []redfishsim.GPU{{Vendor: "NVIDIA", Model: "H100"}}
	sim.AddSystem(spec)
	sim.AddSystem(redfishsim.DefaultSystem("node-2", "52:54:00:aa:00:02"))
	return sim
}

// TestEmulator drives the whole client against the emulator: sessions and basic auth, inventory, the
// one-time PXE boot and power, the certificate pin and wrong credentials.
func TestEmulator(t *testing.T) {
	ctx := context.Background()
	sim := startSim(t)
	addr, err := redfish.ParseAddress(sim.Address("node-1"))
	if err != nil {
		t.Fatal(err)
	}

	for _, basic := range []bool{false, true} {
		t.Run(map[bool]string{false: "session", true: "basic"}[basic], func(t *testing.T) {
			g := NewWithT(t)
			c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret", BasicAuth: basic})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.CertSHA256()).To(Equal(sim.CertSHA256()))
			inv, err := c.Inventory(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(inv.Manufacturer).To(Equal("Yonder Emulated"))
			g.Expect(inv.CPU).To(Equal(redfish.CPU{Arch: "x86_64", Model: "Emulated x86 CPU", Count: 8, MaxSpeedMHz: 2400, SocketCount: 1}))
			g.Expect(inv.MemoryMiB).To(Equal(16384))
			g.Expect(inv.NICs).To(Equal([]redfish.NIC{{Name: "nic0", MAC: "52:54:00:aa:00:01", SpeedGbps: 10}}))
			g.Expect(inv.Disks).To(HaveLen(1))
			g.Expect(inv.Disks[0].SizeBytes).To(Equal(int64(64 << 30)))
			g.Expect(inv.Disks[0].WWN).To(Equal("0x5000000000000001"))
			g.Expect(inv.GPUs).To(Equal([]redfish.GPU{{Name: "GPU0", Vendor: "NVIDIA", Model: "H100"}}))

			checkOneTimePXEBoot(ctx, g, c, sim)
			c.Close()
			g.Expect(sim.Sessions()).To(BeZero(), "Close logs the session out")
		})
	}

	t.Run("wrong credentials", func(t *testing.T) {
		g := NewWithT(t)
		for _, basic := range []bool{false, true} {
			c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "wrong", BasicAuth: basic})
			if err == nil {
				// Basic auth is only checked by the first authenticated request.
				_, err = c.System(ctx)
				c.Close()
			}
			g.Expect(errors.Is(err, redfish.ErrUnauthorized)).To(BeTrue(), "basic=%v: %v", basic, err)
		}
	})

	t.Run("pinned certificate", func(t *testing.T) {
		g := NewWithT(t)
		pin := sim.CertSHA256()
		c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret", PinnedCertSHA256: pin})
		g.Expect(err).NotTo(HaveOccurred())
		c.Close()
		g.Expect(sim.RotateCertificate()).To(Succeed())
		_, err = redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret", PinnedCertSHA256: pin})
		g.Expect(errors.Is(err, redfish.ErrCertificateMismatch)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring(sim.CertSHA256()))
	})

	t.Run("many systems need a path", func(t *testing.T) {
		g := NewWithT(t)
		a := addr
		a.SystemPath = ""
		c, err := redfish.Dial(ctx, redfish.Config{Address: a, Username: "admin", Password: "s3cret"})
		g.Expect(err).NotTo(HaveOccurred())
		defer c.Close()
		_, err = c.System(ctx)
		g.Expect(err).To(MatchError(ContainSubstring("has 2 systems")))
	})
}

// checkOneTimePXEBoot arms the one-time PXE override, cycles the power (the emulator counts a PXE boot
// and consumes the override) and powers off.
func checkOneTimePXEBoot(ctx context.Context, g *WithT, c redfish.Client, sim *redfishsim.Server) {
	sys, err := c.System(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sys.PoweredOn).To(BeFalse())
	g.Expect(c.SetOneTimePXEBoot(ctx, redfish.BootModeCurrent)).To(Succeed())
	sys, err = c.System(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sys.BootOverride).To(Equal("Pxe"))
	pxeBefore := sim.State("node-1").PXEBoots
	g.Expect(c.Power(ctx, redfish.PowerCycle)).To(Succeed())
	st := sim.State("node-1")
	g.Expect(st.PoweredOn).To(BeTrue())
	g.Expect(st.PXEBoots).To(Equal(pxeBefore + 1))
	g.Expect(st.Override).To(BeEmpty(), "a one-time override is consumed by the boot")
	g.Expect(c.Power(ctx, redfish.PowerOff)).To(Succeed())
	g.Expect(sim.State("node-1").PoweredOn).To(BeFalse())
	// A soft power-off is the GracefulShutdown reset type, which the BMC maps to the OS's shutdown.
	g.Expect(c.Power(ctx, redfish.PowerOn)).To(Succeed())
	g.Expect(sim.State("node-1").PoweredOn).To(BeTrue())
	g.Expect(c.Power(ctx, redfish.PowerSoftOff)).To(Succeed())
	g.Expect(sim.State("node-1").PoweredOn).To(BeFalse())
}

// mockup serves DMTF's public-rackmount1 documents read-only; sessions, PATCH and actions are answered
// here and recorded, after the checks a BMC makes (the emulator's validators, driven by the mockup's own
// documents: its writable properties and AllowableValues, its Reset action's ResetTypes).
type mockup struct {
	root string
	mu   sync.Mutex
	log  []string
}

func (m *mockup) doc(p string) (map[string]any, error) {
	f := filepath.Join(m.root, strings.TrimPrefix(p, "/redfish/v1"), "index.json")
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	return doc, json.Unmarshal(b, &doc)
}

func (m *mockup) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimRight(r.URL.Path, "/")
	m.mu.Lock()
	m.log = append(m.log, r.Method+" "+p)
	m.mu.Unlock()
	var body []byte
	if r.Method == http.MethodPost || r.Method == http.MethodPatch {
		if rerr := redfishsim.CheckJSONBody(r); rerr != nil {
			rerr.Write(w)
			return
		}
		body, _ = io.ReadAll(r.Body)
	}
	switch r.Method {
	case http.MethodPost:
		switch {
		case strings.HasSuffix(p, "/SessionService/Sessions"):
			var cred struct{ UserName, Password *string }
			if json.Unmarshal(body, &cred) != nil || cred.UserName == nil || cred.Password == nil {
				http.Error(w, "UserName and Password required", http.StatusBadRequest)
				return
			}
			w.Header().Set("X-Auth-Token", "mocktoken")
			w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"Id":"1"}`))
			return
		case strings.HasSuffix(p, "/Actions/ComputerSystem.Reset"):
			doc, err := m.doc(strings.TrimSuffix(p, "/Actions/ComputerSystem.Reset"))
			if err != nil {
				http.NotFound(w, r)
				return
			}
			if rerr := redfishsim.ValidateAction(doc, "#ComputerSystem.Reset", body, "ResetType"); rerr != nil {
				rerr.Write(w)
				return
			}
		default:
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	case http.MethodPatch:
		doc, err := m.doc(p)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		if rerr := redfishsim.ValidatePatch(doc, body, redfishsim.ComputerSystemWritable); rerr != nil {
			rerr.Write(w)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	case http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
		return
	}
	f := filepath.Join(m.root, strings.TrimPrefix(p, "/redfish/v1"), "index.json")
	if p == "/redfish/v1" {
		f = filepath.Join(m.root, "index.json")
	}
	b, err := os.ReadFile(f)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// TestDMTFMockup runs the client against DMTF's reference mockup of a 1U server, so it also works with
// JSON it was not written against (absent CPUs, FPGAs, VLAN interfaces, SimpleStorage only).
func TestDMTFMockup(t *testing.T) {
	g := NewWithT(t)
	root := filepath.Join("..", "..", "..", "test", "fixtures", "redfish", "public-rackmount1")
	if _, err := os.Stat(filepath.Join(root, "index.json")); err != nil {
		t.Fatalf("DMTF mockup missing (test/fixtures/redfish/README.md): %v", err)
	}
	m := &mockup{root: root}
	srv := httptest.NewTLSServer(m)
	defer srv.Close()
	ctx := context.Background()
	addr, err := redfish.ParseAddress("redfish://" + strings.TrimPrefix(srv.URL, "https://") + "/redfish/v1/Systems/437XR1138R2")
	g.Expect(err).NotTo(HaveOccurred())
	c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "Administrator", Password: "Password"})
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()

	sys, err := c.System(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sys.PoweredOn).To(BeTrue())
	g.Expect(sys.BootOverride).To(Equal("Pxe"))

	inv, err := c.Inventory(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	out, _ := json.Marshal(inv)
	t.Logf("inventory: %s", out)
	g.Expect(inv.Manufacturer).To(Equal("Contoso"))
	g.Expect(inv.CPU.SocketCount).To(Equal(1), "CPU2 is Absent, FPGA1 is not a CPU")
	g.Expect(inv.CPU.Count).To(Equal(16))
	g.Expect(inv.CPU.Arch).To(Equal("x86_64"))
	g.Expect(inv.MemoryMiB).To(BeNumerically(">", 0))
	g.Expect(inv.NICs).To(ContainElement(And(HaveField("MAC", "12:44:6a:3b:04:11"),
		HaveField("IPs", []string{"192.168.0.10"}))), "the static IPv4 address; the link-local IPv6 one is no Machine address")
	g.Expect(inv.Hostname).To(Equal("web483"), "the system's HostName")
	macs := map[string]int{}
	for _, n := range inv.NICs {
		macs[n.MAC]++
	}
	for mac, n := range macs {
		g.Expect(n).To(Equal(1), "one NIC per MAC (%s)", mac)
	}
	g.Expect(inv.Disks).NotTo(BeEmpty(), "disks from SimpleStorage")

	// Every boot override (in each mode) and power action the controller uses passes the mockup's own
	// AllowableValues and writable properties.
	for _, mode := range []redfish.BootMode{redfish.BootModeCurrent, redfish.BootModeUEFI, redfish.BootModeLegacy} {
		g.Expect(c.SetOneTimePXEBoot(ctx, mode)).To(Succeed(), "mode %q", mode)
		g.Expect(c.SetDiskBoot(ctx, mode)).To(Succeed(), "mode %q", mode)
	}
	for _, a := range []redfish.PowerAction{redfish.PowerCycle, redfish.PowerOff, redfish.PowerSoftOff, redfish.PowerOn} {
		g.Expect(c.Power(ctx, a)).To(Succeed(), "%s", a)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g.Expect(m.log).To(ContainElement("PATCH /redfish/v1/Systems/437XR1138R2"))
	g.Expect(m.log).To(ContainElement("POST /redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset"))
}

// A BMC refuses a PATCH whose If-Match names a version of the system it no longer has (412), and gofish
// sends the ETag of its last read. The system changes under the client between its read and its PATCH
// (someone else powered it on here; a host that powers itself off does the same), and the client reads it
// again and repeats the change instead of failing the provisioning step.
func TestBootOverrideAfterTheSystemChanged(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim := startSim(t)
	addr, err := redfish.ParseAddress(sim.Address("node-1"))
	g.Expect(err).NotTo(HaveOccurred())
	dial := func() redfish.Client {
		c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret"})
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(c.Close)
		return c
	}
	c, other := dial(), dial()
	sys, err := c.System(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sys.PoweredOn).To(BeFalse())
	g.Expect(other.Power(ctx, redfish.PowerOn)).To(Succeed())

	before := sim.State("node-1").Requests
	g.Expect(c.SetOneTimePXEBoot(ctx, redfish.BootModeCurrent)).To(Succeed())
	g.Expect(sim.State("node-1").Override).To(Equal("Pxe"))
	g.Expect(sim.State("node-1").Requests-before).To(Equal(int64(3)), "the refused PATCH, one read, the PATCH again")

	g.Expect(other.Power(ctx, redfish.PowerOff)).To(Succeed())
	g.Expect(c.SetDiskBoot(ctx, redfish.BootModeCurrent)).To(Succeed())
	g.Expect(sim.State("node-1").Override).To(Equal("Hdd"))
}

// Some BMCs check If-Match on actions as well. gofish repeats a refused (412) action without If-Match
// itself, so a power action after the system changed under the client still happens, once.
func TestPowerAfterTheSystemChangedOnAStrictBMC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim, err := redfishsim.Start(redfishsim.Options{Username: "admin", Password: "s3cret", IfMatchOnActions: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(sim.Close)
	sim.AddSystem(redfishsim.DefaultSystem("node-1", "52:54:00:aa:00:01"))
	addr, err := redfish.ParseAddress(sim.Address("node-1"))
	g.Expect(err).NotTo(HaveOccurred())
	c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret"})
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	other, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret"})
	g.Expect(err).NotTo(HaveOccurred())
	defer other.Close()

	_, err = c.System(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.SetOneTimePXEBoot(ctx, redfish.BootModeCurrent)).To(Succeed(), "someone else arms a PXE boot: the system's ETag changes")
	before := sim.State("node-1").Requests
	g.Expect(c.Power(ctx, redfish.PowerOn)).To(Succeed())
	g.Expect(sim.State("node-1").Requests-before).To(Equal(int64(2)), "the refused reset and the reset again")
	g.Expect(sim.State("node-1")).To(And(HaveField("PoweredOn", BeTrue()), HaveField("PXEBoots", 1)))
}

// BMCs offer different ResetTypes: each power action uses one the system lists — a power cycle is
// PowerCycle where ForceRestart is missing, a power-on ForceOn where On is — and an action the BMC cannot
// carry out is refused before anything is sent, naming what the BMC offers.
func TestPowerUsesTheResetTypesTheBMCOffers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	drv := redfishsim.NewMemoryDriver()
	sim, err := redfishsim.Start(redfishsim.Options{Username: "admin", Password: "s3cret", Driver: drv})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(sim.Close)
	spec := redfishsim.DefaultSystem("node-1", "52:54:00:aa:00:01")
	spec.ResetTypes = []string{"ForceOn", "ForceOff", "PowerCycle"}
	sim.AddSystem(spec)
	addr, err := redfish.ParseAddress(sim.Address("node-1"))
	g.Expect(err).NotTo(HaveOccurred())
	c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret"})
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()

	g.Expect(c.Power(ctx, redfish.PowerOn)).To(Succeed(), "ForceOn")
	g.Expect(sim.State("node-1").PoweredOn).To(BeTrue())
	g.Expect(c.Power(ctx, redfish.PowerCycle)).To(Succeed(), "PowerCycle")
	g.Expect(drv.Boots("node-1")).To(HaveLen(2), "powered on, then cycled")
	before := sim.State("node-1").Requests
	err = c.Power(ctx, redfish.PowerSoftOff)
	g.Expect(errors.Is(err, redfish.ErrResetTypeNotOffered)).To(BeTrue(), "%v", err)
	g.Expect(err).To(MatchError(And(ContainSubstring("GracefulShutdown"), ContainSubstring("PushPowerButton"), ContainSubstring("PowerCycle"))))
	g.Expect(sim.State("node-1").Requests).To(Equal(before), "nothing sent")
	g.Expect(sim.State("node-1").PoweredOn).To(BeTrue())
}

// spec.bootMode travels with the boot override as BootSourceOverrideMode, as Ironic sends it; without one
// the system keeps its mode.
func TestBootOverrideCarriesTheBootMode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim := startSim(t)
	addr, err := redfish.ParseAddress(sim.Address("node-1"))
	g.Expect(err).NotTo(HaveOccurred())
	c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret"})
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	g.Expect(sim.State("node-1").BootMode).To(Equal("Legacy"), "the emulator's systems start in legacy mode")
	g.Expect(c.SetOneTimePXEBoot(ctx, redfish.BootModeUEFI)).To(Succeed())
	g.Expect(sim.State("node-1")).To(And(HaveField("Override", "Pxe"), HaveField("BootMode", "UEFI")))
	g.Expect(c.SetDiskBoot(ctx, redfish.BootModeCurrent)).To(Succeed())
	g.Expect(sim.State("node-1")).To(And(HaveField("Override", "Hdd"), HaveField("BootMode", "UEFI")), "kept")
	g.Expect(c.SetDiskBoot(ctx, redfish.BootModeLegacy)).To(Succeed())
	g.Expect(sim.State("node-1").BootMode).To(Equal("Legacy"))
}
