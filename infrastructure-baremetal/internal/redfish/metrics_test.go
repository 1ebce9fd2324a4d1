package redfish_test

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
	"github.com/yonder-dev/yonder/test/promread"
)

var operations = []string{redfish.OpServiceRoot, redfish.OpSessionCreate, redfish.OpSessionDelete, redfish.OpListSystems,
	redfish.OpGetSystem, redfish.OpBootOverride, redfish.OpReset, redfish.OpInventory, redfish.OpOther}

// bmcCounts reads yonder_bmc_requests_total by operation (all codes) and by operation and code.
type bmcCounts struct {
	byOp     map[string]float64
	byOpCode map[[2]string]float64
	seconds  map[string]float64
	total    float64
}

func readBMCCounts() bmcCounts {
	c := bmcCounts{byOp: map[string]float64{}, byOpCode: map[[2]string]float64{}, seconds: map[string]float64{}}
	for _, op := range operations {
		c.byOp[op] = promread.Sum(metrics.Registry, "yonder_bmc_requests_total", map[string]string{"operation": op})
		c.seconds[op] = promread.Sum(metrics.Registry, "yonder_bmc_request_duration_seconds", map[string]string{"operation": op})
		for _, code := range []string{"200", "201", "204", "401", "404", redfish.CodeError, redfish.CodeTimeout} {
			c.byOpCode[[2]string{op, code}] = promread.Sum(metrics.Registry, "yonder_bmc_requests_total", map[string]string{"operation": op, "code": code})
		}
	}
	c.total = promread.Sum(metrics.Registry, "yonder_bmc_requests_total", nil)
	return c
}

// since is what was counted after was.
func (c bmcCounts) since(was bmcCounts) bmcCounts {
	d := bmcCounts{byOp: map[string]float64{}, byOpCode: map[[2]string]float64{}, seconds: map[string]float64{}, total: c.total - was.total}
	for k, v := range c.byOp {
		d.byOp[k] = v - was.byOp[k]
	}
	for k, v := range c.byOpCode {
		d.byOpCode[k] = v - was.byOpCode[k]
	}
	for k, v := range c.seconds {
		d.seconds[k] = v - was.seconds[k]
	}
	return d
}

// TestRequestMetrics drives a registration, an inspection and a PXE power cycle through the client
// against the emulator, a real HTTP peer that counts what it serves: every request it served is counted
// once, under the operation it was, and timed.
func TestRequestMetrics(t *testing.T) {
	ctx := context.Background()
	sim := startSim(t)
	addr, err := redfish.ParseAddress(sim.Address("node-1"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("session", func(t *testing.T) {
		g := NewWithT(t)
		was, served := readBMCCounts(), sim.TotalRequests()
		c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret"})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.System(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Inventory(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.SetOneTimePXEBoot(ctx, redfish.BootModeCurrent)).To(Succeed())
		g.Expect(c.Power(ctx, redfish.PowerCycle)).To(Succeed())
		g.Expect(c.Power(ctx, redfish.PowerOff)).To(Succeed())
		c.Close()
		d := readBMCCounts().since(was)
		t.Logf("requests by operation: %v", d.byOp)

		g.Expect(d.total).To(BeEquivalentTo(sim.TotalRequests()-served), "every request the BMC served is counted once")
		g.Expect(d.byOpCode[[2]string{redfish.OpServiceRoot, "200"}]).To(BeEquivalentTo(1))
		g.Expect(d.byOpCode[[2]string{redfish.OpSessionCreate, "201"}]).To(BeEquivalentTo(1))
		g.Expect(d.byOp[redfish.OpGetSystem]).To(BeNumerically(">=", 1))
		g.Expect(d.byOp[redfish.OpInventory]).To(BeNumerically(">=", 5), "processors, memory, NICs, storage, PCIe: each at least one read")
		g.Expect(d.byOp[redfish.OpBootOverride]).To(BeEquivalentTo(1))
		g.Expect(d.byOp[redfish.OpReset]).To(BeEquivalentTo(2), "cycle and off")
		g.Expect(d.byOp[redfish.OpSessionDelete]).To(BeEquivalentTo(1))
		g.Expect(d.byOp[redfish.OpOther]).To(BeZero(), "every request the client sends has its operation")
		for _, op := range operations {
			g.Expect(d.seconds[op]).To(Equal(d.byOp[op]), "each %s request is timed once", op)
		}
	})

	t.Run("basic auth", func(t *testing.T) {
		g := NewWithT(t)
		was, served := readBMCCounts(), sim.TotalRequests()
		c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "s3cret", BasicAuth: true})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.System(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		c.Close()
		d := readBMCCounts().since(was)
		g.Expect(d.total).To(BeEquivalentTo(sim.TotalRequests() - served))
		g.Expect(d.byOp[redfish.OpSessionCreate]).To(BeZero(), "basic auth opens no session")
		g.Expect(d.byOp[redfish.OpSessionDelete]).To(BeZero())
		g.Expect(d.byOpCode[[2]string{redfish.OpGetSystem, "200"}]).To(BeEquivalentTo(1))
	})

	t.Run("rejected credentials", func(t *testing.T) {
		g := NewWithT(t)
		was := readBMCCounts()
		_, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "admin", Password: "wrong"})
		g.Expect(err).To(MatchError(redfish.ErrUnauthorized))
		d := readBMCCounts().since(was)
		g.Expect(d.byOpCode[[2]string{redfish.OpSessionCreate, "401"}]).To(BeEquivalentTo(1))
	})

	t.Run("unreachable BMC", func(t *testing.T) {
		g := NewWithT(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		g.Expect(err).NotTo(HaveOccurred())
		dead := ln.Addr().String()
		g.Expect(ln.Close()).To(Succeed())
		was := readBMCCounts()
		_, err = redfish.Dial(ctx, redfish.Config{Address: redfish.Address{Endpoint: "https://" + dead}, Username: "admin", Password: "s3cret"})
		g.Expect(err).To(HaveOccurred())
		d := readBMCCounts().since(was)
		g.Expect(d.byOpCode[[2]string{redfish.OpServiceRoot, redfish.CodeError}]).To(BeEquivalentTo(1), "a refused connection is counted as an error")
	})

	checkLabels(t, sim.Host(), "admin", "s3cret", "node-1")
}

// TestRequestMetricsDMTFMockup counts the requests against DMTF's reference mockup: its resource tree
// (Chassis, SimpleStorage, absent members) is not our emulator's, and still every request has its
// operation.
func TestRequestMetricsDMTFMockup(t *testing.T) {
	g := NewWithT(t)
	root := filepath.Join("..", "..", "..", "test", "fixtures", "redfish", "public-rackmount1")
	if _, err := os.Stat(filepath.Join(root, "index.json")); err != nil {
		t.Fatalf("DMTF mockup missing (test/fixtures/redfish/README.md): %v", err)
	}
	m := &mockup{root: root}
	srv := httptest.NewTLSServer(m)
	defer srv.Close()
	ctx := context.Background()
	host := strings.TrimPrefix(srv.URL, "https://")
	addr, err := redfish.ParseAddress("redfish://" + host + "/redfish/v1/Systems/437XR1138R2")
	g.Expect(err).NotTo(HaveOccurred())
	was := readBMCCounts()
	c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "Administrator", Password: "Password"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Inventory(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.SetOneTimePXEBoot(ctx, redfish.BootModeCurrent)).To(Succeed())
	g.Expect(c.Power(ctx, redfish.PowerCycle)).To(Succeed())
	c.Close()
	d := readBMCCounts().since(was)
	t.Logf("requests by operation: %v", d.byOp)

	m.mu.Lock()
	served := len(m.log)
	m.mu.Unlock()
	g.Expect(d.total).To(BeEquivalentTo(served), "every request the mockup served is counted once")
	g.Expect(d.byOp[redfish.OpOther]).To(BeZero())
	g.Expect(d.byOp[redfish.OpInventory]).To(BeNumerically(">=", 5))
	g.Expect(d.byOpCode[[2]string{redfish.OpBootOverride, "204"}]).To(BeEquivalentTo(1))
	g.Expect(d.byOpCode[[2]string{redfish.OpReset, "204"}]).To(BeEquivalentTo(1))
	g.Expect(d.byOpCode[[2]string{redfish.OpSessionDelete, "204"}]).To(BeEquivalentTo(1))

	checkLabels(t, host, "Administrator", "Password", "437XR1138R2", "mocktoken")
}

var codeLabel = regexp.MustCompile(`^([1-9][0-9][0-9]|timeout|error)$`)

// checkLabels asserts that the BMC metrics' label values are the fixed operations and codes: never an
// address, a credential, a system or session ID.
func checkLabels(t *testing.T, secrets ...string) {
	t.Helper()
	g := NewWithT(t)
	mfs, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "yonder_bmc_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				n++
				switch l.GetName() {
				case "operation":
					g.Expect(operations).To(ContainElement(l.GetValue()))
				case "code":
					g.Expect(l.GetValue()).To(MatchRegexp(codeLabel.String()))
				default:
					t.Errorf("unexpected label %s on %s", l.GetName(), mf.GetName())
				}
				for _, s := range secrets {
					g.Expect(l.GetValue()).NotTo(ContainSubstring(s))
				}
			}
		}
	}
	g.Expect(n).To(BeNumerically(">", 0), "the BMC metrics have series")
}
