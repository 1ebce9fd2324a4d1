package sshmachine_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
	"github.com/yonder-dev/yonder/pkg/claim"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

// One Machine on a real sshd host, the provider's requests counted by verb and resource from the
// Machine's creation until it is provisioned, its conditions observed its last generation and its host
// shows Provisioned (then a moment longer, for any follow-up pass to show). Each object is written
// once per step and no more, and nothing is read that a write or the cache already told:
//   - the YonderSSHMachine's status 2 times (the start recorded before the run, the result: the first
//     check after the start finds a short run finished), each with its conditions in the same request
//     and the last one already stamped with the generation spec.providerID made (CAPI's patch helper
//     sent the conditions apart, a further pass restamped them, and the run's acceptance had a write of
//     its own: 7);
//   - its metadata and spec 3 times (the reservation carrying the finalizer; the claimed host, written
//     under the reservation's resourceVersion, which confirms the machine, so the machine is not read
//     again after the claim; the providerID);
//   - the YonderSSHHost's status 2 times (Provisioning, with the conditions' new observedGeneration in
//     the same request, then Provisioned: the host waits for its machine to record the claim instead of
//     writing Claimed first; up to 8, seen when watch events came late beside CAPI at full pace);
//   - no Secret: the host's credentials come from the watch of the Secrets the host controller labelled
//     as credentials, and the bootstrap data Secret, labelled with its cluster as bootstrap providers
//     do, from the manager's cache.
//
// The claim and its Events stay as they were: the finalizer is on the machine before the host records
// the claim, and the claim is recorded on both, once.
func TestProvisioningWritesEachObjectOncePerStep(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "writes").Name
	hs, keyPEM := sshhosts.StartForTest(t, "wr", 1)
	registerHosts(g, ns, hs, keyPEM, nil, nil)
	rc, _ := harness.CountRequests(env.Config)
	kinds := &requestKinds{n: map[string]int64{}}
	count0 := rc.WrapTransport
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return kinds.wrap(count0(rt)) }
	o := testOptions()
	o.ProbeInterval = time.Hour // no probe's status write in the count
	harness.StartProvider(t, rc, env.GetScheme(), setup.Reconcilers(o))
	cluster := newCluster(t, g, ns, "wr")
	data := dataSecret(g, ns, "data", cluster.Name, "#cloud-config\nruncmd:\n- mkdir -p /run/cluster-api && touch /run/cluster-api/bootstrap-success.complete\n")
	g.Eventually(func(g Gomega) {
		for _, h := range hostList(g, ns) {
			g.Expect(h.Status.Phase).To(Equal(infrav1.HostPhaseAvailable))
		}
	}).Should(Succeed())

	kinds.reset()
	newMachine(g, ns, cluster.Name, "m", "wr-0", data.Name)
	m := &infrav1.YonderSSHMachine{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: "m"}, m)).To(Succeed())
		g.Expect(ptr.Deref(m.Status.Initialization.Provisioned, false)).To(BeTrue())
		for _, c := range []string{clusterv1.ReadyCondition, infrav1.YonderSSHMachineHostClaimedCondition, clusterv1.PausedCondition} {
			g.Expect(condition(m, c)).NotTo(BeNil(), c)
			g.Expect(condition(m, c).ObservedGeneration).To(Equal(m.Generation), c)
		}
		g.Expect(hostList(g, ns)[0].Status.Phase).To(Equal(infrav1.HostPhaseProvisioned))
	}).Should(Succeed())
	// A follow-up pass would write within 2 s (claim.StaleRetry is 1 s): the bounds hold all that time.
	var n map[string]int64
	g.Consistently(func(g Gomega) {
		n = kinds.snapshot()
		g.Expect(n).To(HaveKeyWithValue("PATCH yondersshmachines/status", BeNumerically("<=", 2)))
		g.Expect(n).To(HaveKeyWithValue("PATCH yondersshmachines", BeNumerically("<=", 3)))
		g.Expect(n).To(HaveKeyWithValue("PATCH yondersshhosts/status", BeNumerically("<=", 2)))
		g.Expect(n).To(HaveKeyWithValue("PUT yondersshhosts", int64(1)), "one claim")
		g.Expect(n).NotTo(HaveKey("GET yondersshmachines"), "the claim confirmed by the machine's own write")
		g.Expect(n).NotTo(HaveKey("GET secrets"), "the credentials and the data Secret from watches")
	}, 2*time.Second, 100*time.Millisecond).Should(Succeed())
	t.Logf("requests of the provider: %v", n)

	g.Expect(m.Finalizers).To(ContainElement(infrav1.MachineFinalizer))
	g.Expect(condition(m, clusterv1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(condition(m, infrav1.YonderSSHMachineBootstrapExecutedCondition).Reason).To(Equal(infrav1.YonderSSHMachineBootstrapSucceededReason))
	events := &corev1.EventList{}
	g.Expect(env.List(ctx, events, client.InNamespace(ns))).To(Succeed())
	claims := 0
	for _, e := range events.Items {
		if e.Reason == claim.HostClaimedEvent {
			claims++
		}
	}
	g.Expect(claims).To(Equal(2), "the claim recorded on the machine and on the host")
}
