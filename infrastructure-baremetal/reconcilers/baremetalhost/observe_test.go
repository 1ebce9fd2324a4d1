package baremetalhost_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/promread"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// The hosts' gauge follows the hosts through registration and inspection at scrape time, by state and
// operational status: one host reaches available, one with wrong credentials stays registering in error,
// a detached one is counted as detached, and an unlabelled one is not counted at all. The BMC requests of
// the registration are counted by operation, and no label of either family carries the BMC's address,
// its credentials or its system ID.
func TestHostAndBMCMetrics(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-metrics").Name
	sim := startSim(t, nil)
	ids := []string{"sysmetric-a", "sysmetric-b", "sysmetric-c", "sysmetric-d"}
	for i, id := range ids {
		sim.AddSystem(redfishsim.DefaultSystem(id, "52:54:00:14:00:0"+string(rune('1'+i))))
	}
	hostsIn := func(state, status string) func() float64 {
		return func() float64 {
			return promread.Sum(metrics.Registry, "yonder_baremetalhosts", map[string]string{"namespace": ns, "state": state, "operational_status": status})
		}
	}
	sessions := func() float64 {
		return promread.Sum(metrics.Registry, "yonder_bmc_requests_total", map[string]string{"operation": "session_create", "code": "201"})
	}
	rejected := func() float64 {
		return promread.Sum(metrics.Registry, "yonder_bmc_requests_total", map[string]string{"operation": "session_create", "code": "401"})
	}
	inventoryReads := func() float64 {
		return promread.Sum(metrics.Registry, "yonder_bmc_requests_total", map[string]string{"operation": "inventory"})
	}
	sessionsBefore, rejectedBefore, inventoryBefore := sessions(), rejected(), inventoryReads()
	startController(t, testReconciler(nil), ns)

	noWindow := func(h *metal3v1.BareMetalHost) { delete(h.Annotations, baremetalhost.EnrolmentWindowAnnotation) }
	ok := newHost(g, ns, "ok", sim, ids[0], "52:54:00:14:00:01", bmcPass, noWindow)
	newHost(g, ns, "wrong", sim, ids[1], "52:54:00:14:00:02", "wrong", noWindow)
	newHost(g, ns, "detached", sim, ids[2], "52:54:00:14:00:03", bmcPass, noWindow, func(h *metal3v1.BareMetalHost) {
		h.Annotations[metal3v1.DetachedAnnotation] = ""
	})
	newHost(g, ns, "not-ours", sim, ids[3], "52:54:00:14:00:04", bmcPass, noWindow, func(h *metal3v1.BareMetalHost) { h.Labels = nil })

	g.Eventually(state(ok)).Should(Equal(metal3v1.StateAvailable))
	g.Eventually(hostsIn("available", "OK")).Should(BeEquivalentTo(1))
	g.Eventually(hostsIn("registering", "error")).Should(BeEquivalentTo(1))
	g.Expect(hostsIn("none", "detached")()).To(BeEquivalentTo(1))
	g.Expect(promread.Sum(metrics.Registry, "yonder_baremetalhosts", map[string]string{"namespace": ns})).To(BeEquivalentTo(3), "the unlabelled host is not counted")

	g.Expect(sessions()-sessionsBefore).To(BeNumerically(">=", 1), "the available host's session was counted (one serves all its passes: TestRegisterInspectAvailable)")
	g.Expect(rejected()-rejectedBefore).To(BeNumerically(">=", 1), "the wrong password is rejected at session creation")
	g.Expect(inventoryReads()-inventoryBefore).To(BeNumerically(">=", 5), "inspection reads processors, memory, NICs, storage and PCIe")

	// Deleting the available host moves the gauge at the next scrape, without waiting for any reconcile.
	g.Expect(env.Delete(ctx, ok)).To(Succeed())
	g.Eventually(hostsIn("available", "OK")).Should(BeZero())

	mfs, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "yonder_bmc_") && mf.GetName() != "yonder_baremetalhosts" && mf.GetName() != "yonder_metal_phase_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				for _, secret := range []string{sim.Host(), bmcPass, bmcUser, "sysmetric", sim.CertSHA256()} {
					g.Expect(l.GetValue()).NotTo(ContainSubstring(secret), "label %s of %s", l.GetName(), mf.GetName())
				}
			}
		}
	}
}
