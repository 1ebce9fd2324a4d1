package baremetalhost_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/wait"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// transitionKey names the host's durable progress; every change of it is a state transition.
func transitionKey(h *metal3v1.BareMetalHost) string {
	raw := h.Annotations[baremetalhost.StateAnnotation]
	_, pinned := h.Annotations[baremetalhost.CertPinAnnotation]
	_, enrolled := h.Annotations[baremetalhost.EnrolmentAnnotation]
	return fmt.Sprintf("%s|pin=%v|tpm=%v|status=%s", raw, pinned, enrolled, h.Status.Provisioning.State)
}

// The controller is killed (its manager cancelled: in-flight Redfish calls and API writes cut off) the
// moment each transition of a host's whole life becomes visible — pin recorded, registering, inspecting,
// available, provisioning, PXE boot requested, TPM enrolled, provisioned, deprovisioning, available —
// and a fresh controller is started each time. The host must end each phase right: one PXE boot per
// attempt that was recorded, bootstrap data released once, provisioned, then available and off.
func TestRestartAtEveryTransition(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-restart").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("s1", "52:54:00:30:00:01")
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:30:00:01"))
	newReconciler := func() *baremetalhost.Reconciler {
		r := testReconciler(lab.inv)
		r.ProvisionTimeout = 20 * time.Second
		return r
	}
	proc := startController(t, newReconciler(), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:30:00:01", bmcPass)

	var seen []string
	last, restarts, phase := "", 0, 0
	// Every 5 ms: record a new transition (and restart the controller on it), drive the host's life on.
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		cur := getHost(g, h)
		if key := transitionKey(cur); key != last {
			seen = append(seen, key)
			last = key
			proc.Stop()
			restarts++
			proc = startController(t, newReconciler(), ns)
		}
		st := cur.Status.Provisioning.State
		switch {
		case phase == 0 && st == metal3v1.StateAvailable:
			claim(g, ns, h, "restart-data")
			phase = 1
		case phase == 1 && st == metal3v1.StateProvisioned:
			release(g, h)
			phase = 2
		case phase == 2 && st == metal3v1.StateAvailable:
			phase = 3
		}
		return phase == 3, nil
	})
	if err != nil {
		boots, data, errs := hosts.snapshot("s1")
		t.Fatalf("host did not finish its life; transitions seen: %q; PXE boots %d, data %q, boot errors %q", seen, boots, data, errs)
	}
	t.Logf("%d restarts over %d transitions", restarts, len(seen))
	for _, s := range seen {
		t.Logf("  %s", s)
	}
	got := getHost(g, h)
	g.Expect(got.Status.ErrorMessage).To(BeEmpty())
	g.Expect(got.Status.PoweredOn).To(BeFalse())
	g.Eventually(func() bool { return sim.State("s1").PoweredOn }).Should(BeFalse())
	g.Eventually(func() []string { _, data, _ := hosts.snapshot("s1"); return data }).Should(HaveLen(1))
	boots, data, errs := hosts.snapshot("s1")
	g.Expect(data).To(Equal([]string{"restart-data"}), "bootstrap data released exactly once")
	g.Expect(boots).To(BeNumerically(">=", 1))
	g.Expect(boots).To(BeNumerically("<=", 2), "at most one PXE boot per recorded attempt (errors: %q)", errs)
	g.Expect(restarts).To(BeNumerically(">=", 8))
}
