package sshmachine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

// newMachine creates a Machine of cluster with its YonderSSHMachine selecting the host named host.
func newMachine(g *WithT, ns, cluster, name, host, dataSecret string) {
	ctx := context.Background()
	sm := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderSSHMachineSpec{HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"yonder.dev/host": host}}}}
	g.Expect(env.Create(ctx, sm)).To(Succeed())
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.MachineSpec{ClusterName: cluster, Version: "v1.36.3",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(dataSecret)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: name}}}
	g.Expect(env.Create(ctx, m)).To(Succeed())
}

func patchHost(g *WithT, ns, name string, f func(*infrav1.YonderSSHHost)) {
	g.Eventually(func() error {
		h := &infrav1.YonderSSHHost{}
		if err := env.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, h); err != nil {
			return err
		}
		f(h)
		return env.Update(context.Background(), h)
	}).Should(Succeed())
}

// Every way a host can fail a Machine yields its own condition reason, and deleting the Machines
// leaves no claim behind: a host key that is not the pinned one, a key the host refuses, nobody
// listening, a failing runcmd, cloud-init the provider does not execute, no matching host. A host
// that becomes unreachable after provisioning is retried a bounded number of times on delete, then
// released only through the operator's escape hatch, and stays out of the pool until marked clean.
func TestFailureModesYieldConditionsAndNeverLeakClaims(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "fail").Name
	hs := failingHosts(t, g, ns)
	o := testOptions()
	startProvider(t, o)
	cluster := newCluster(t, g, ns, "fail")
	good := dataSecret(g, ns, "good", cluster.Name, "#cloud-config\nruncmd:\n- mkdir -p /run/cluster-api && touch /run/cluster-api/bootstrap-success.complete\n")
	failing := dataSecret(g, ns, "failing", cluster.Name, "#cloud-config\nruncmd:\n- echo boom >&2\n- exit 3\n")
	unsupported := dataSecret(g, ns, "unsupported", cluster.Name, "#cloud-config\npackages: [nginx]\napt: {}\nusers:\n- default\nruncmd:\n- true\n")

	newMachine(g, ns, cluster.Name, "mismatch", "fm-0", good.Name)
	newMachine(g, ns, cluster.Name, "badcreds", "fm-1", good.Name)
	newMachine(g, ns, cluster.Name, "unreachable", "fm-dead", good.Name)
	newMachine(g, ns, cluster.Name, "runcmd", "fm-2", failing.Name)
	newMachine(g, ns, cluster.Name, "unsupported", "fm-3", unsupported.Name)
	newMachine(g, ns, cluster.Name, "nohost", "none", good.Name)
	newMachine(g, ns, cluster.Name, "gone", "fm-4", good.Name)

	checkFailureReasons(ctx, g, ns)

	// fm-4 goes away after provisioning: cleanup on delete is retried, then waits for the operator.
	g.Expect(hs[4].Stop()).To(Succeed())
	for _, name := range []string{"mismatch", "badcreds", "unreachable", "runcmd", "unsupported", "nohost", "gone"} {
		g.Expect(env.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		m := &infrav1.YonderSSHMachine{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone"}, m)).To(Succeed())
		c := condition(m, infrav1.YonderSSHMachineHostCleanedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.YonderSSHMachineCleanupFailedReason))
		g.Expect(c.Message).To(ContainSubstring("Retries exhausted"))
		g.Expect(c.Message).To(ContainSubstring(infrav1.SkipCleanupAnnotation))
		g.Expect(m.Status.CleanupAttempts).To(BeEquivalentTo(o.CleanupRetries))
	}).Should(Succeed())
	// Every other Machine is gone and its host released.
	g.Eventually(func(g Gomega) {
		names := []string{}
		for _, m := range sshMachines(g, ns) {
			names = append(names, m.Name)
		}
		g.Expect(names).To(ConsistOf("gone"))
		claims := checkClaims(g, ns)
		g.Expect(claims).To(HaveLen(1))
		g.Expect(claims).To(ContainElement("fm-4"))
	}).Should(Succeed())

	checkSkipCleanupEscapeHatch(ctx, g, ns, cluster.Name, good.Name)
}

// failingHosts starts 5 hosts fm-0…fm-4 and registers them with a way each to fail: fm-0 pins another
// host's key, fm-1 uses a key the host does not authorize, fm-dead is a host where nothing listens.
func failingHosts(t *testing.T, g *WithT, ns string) []*sshhosts.Host {
	t.Helper()
	ctx := context.Background()
	hs, keyPEM := sshhosts.StartForTest(t, "fm", 5)
	registerHosts(g, ns, hs, keyPEM, nil, []string{"rm -rf /etc/kubernetes/*"})
	patchHost(g, ns, "fm-0", func(h *infrav1.YonderSSHHost) { h.Spec.HostKey = sshexec.FormatHostKey(hs[1].HostKey) })
	otherPEM, _, err := sshhosts.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}, Data: map[string][]byte{hostconn.PrivateKeyKey: otherPEM}})).To(Succeed())
	patchHost(g, ns, "fm-1", func(h *infrav1.YonderSSHHost) { h.Spec.CredentialsSecretRef.Name = "other" })
	dead := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fm-dead", Labels: map[string]string{"yonder.dev/host": "fm-dead"}},
		Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: hs[0].Address.String(), Port: 2, User: "root",
			CredentialsSecretRef: infrav1.SecretReference{Name: "ssh-fm-0"}, HostKey: sshexec.FormatHostKey(hs[0].HostKey)}}}
	g.Expect(env.Create(ctx, dead)).To(Succeed())
	return hs
}

// checkFailureReasons asserts each failing machine's reason (and what its status and message say).
func checkFailureReasons(ctx context.Context, g *WithT, ns string) {
	g.Eventually(reasonOf(ns, "mismatch", infrav1.YonderSSHMachineBootstrapExecutedCondition)).Should(Equal(infrav1.HostKeyMismatchReason))
	g.Eventually(reasonOf(ns, "badcreds", infrav1.YonderSSHMachineBootstrapExecutedCondition)).Should(Equal(infrav1.SSHAuthFailedReason))
	g.Eventually(reasonOf(ns, "unreachable", infrav1.YonderSSHMachineBootstrapExecutedCondition)).Should(Equal(infrav1.SSHUnreachableReason))
	g.Eventually(reasonOf(ns, "runcmd", infrav1.YonderSSHMachineBootstrapExecutedCondition)).Should(Equal(infrav1.YonderSSHMachineBootstrapFailedReason))
	g.Eventually(reasonOf(ns, "unsupported", infrav1.YonderSSHMachineBootstrapExecutedCondition)).Should(Equal(infrav1.YonderSSHMachineBootstrapDataUnsupportedReason))
	g.Eventually(reasonOf(ns, "nohost", infrav1.YonderSSHMachineHostClaimedCondition)).Should(Equal(infrav1.YonderSSHMachineNoHostAvailableReason))
	g.Eventually(reasonOf(ns, "gone", infrav1.YonderSSHMachineBootstrapExecutedCondition)).Should(Equal(infrav1.YonderSSHMachineBootstrapSucceededReason))
	for _, name := range []string{"mismatch", "badcreds", "unreachable", "runcmd", "unsupported"} {
		g.Expect(reasonOf(ns, name, infrav1.YonderSSHMachineHostClaimedCondition)()).To(Equal(infrav1.YonderSSHMachineHostClaimedReason), name)
		g.Expect(reasonOf(ns, name, clusterv1.ReadyCondition)()).NotTo(Equal("Ready"), name)
	}
	m := &infrav1.YonderSSHMachine{}
	// The condition and the status fields are separate patches of the same reconcile (CAPI's patch
	// helper): read until both are visible.
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "runcmd"}, m)).To(Succeed())
		g.Expect(m.Status.Bootstrap).NotTo(BeNil())
		g.Expect(m.Status.Bootstrap.ExitCode).To(HaveValue(BeEquivalentTo(3)))
		g.Expect(m.Status.Bootstrap.OutputTail).To(ContainSubstring("boom"))
	}).Should(Succeed())
	g.Expect(condition(m, infrav1.YonderSSHMachineBootstrapExecutedCondition).Message).To(ContainSubstring("delete the Machine"))
	g.Expect(m.Annotations).To(HaveKey("clusterctl.cluster.x-k8s.io/block-move"), "not provisioned: clusterctl move must wait")
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "unsupported"}, m)).To(Succeed())
	// Every refused key is named at once, with what to do about them.
	for _, refused := range []string{"key apt", "key packages", "users[0]: default", "Remove these from the bootstrap config"} {
		g.Expect(condition(m, infrav1.YonderSSHMachineBootstrapExecutedCondition).Message).To(ContainSubstring(refused))
	}
	// The host controller sees the same problems on its probes.
	g.Eventually(func(g Gomega) {
		h := &infrav1.YonderSSHHost{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fm-0"}, h)).To(Succeed())
		g.Expect(h.Status.Conditions).To(ContainElement(And(HaveField("Type", infrav1.YonderSSHHostReachableCondition), HaveField("Reason", infrav1.HostKeyMismatchReason))))
	}).Should(Succeed())
}

// checkSkipCleanupEscapeHatch releases machine "gone" without cleanup: the host stays out of the pool
// until marked clean.
func checkSkipCleanupEscapeHatch(ctx context.Context, g *WithT, ns, cluster, data string) {
	// The escape hatch: release without cleanup; the host stays out of the pool until marked clean.
	g.Eventually(func() error {
		m := &infrav1.YonderSSHMachine{}
		if err := env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone"}, m); err != nil {
			return err
		}
		m.Annotations[infrav1.SkipCleanupAnnotation] = "true"
		return env.Update(ctx, m)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(sshMachines(g, ns)).To(BeEmpty())
		g.Expect(checkClaims(g, ns)).To(BeEmpty())
		h := &infrav1.YonderSSHHost{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fm-4"}, h)).To(Succeed())
		g.Expect(h.Annotations).To(HaveKeyWithValue(infrav1.NeedsCleanupAnnotation, "gone"))
		g.Expect(h.Status.Phase).To(Equal(infrav1.HostPhaseError))
	}).Should(Succeed())
	newMachine(g, ns, cluster, "after", "fm-4", data)
	g.Eventually(reasonOf(ns, "after", infrav1.YonderSSHMachineHostClaimedCondition)).Should(Equal(infrav1.YonderSSHMachineNoHostAvailableReason))
	g.Expect(env.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "after"}})).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(sshMachines(g, ns)).To(BeEmpty()) }).Should(Succeed())
}

// The webhooks reject what would otherwise fail later or silently: a credentials Secret in another
// namespace, an unparsable host key, no host key without trust-on-first-use, a broken selector, a claim
// handed from one machine to another, a changed template.
func TestWebhooksRejectInvalidObjects(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "wh").Name
	host := func(mut func(*infrav1.YonderSSHHost)) *infrav1.YonderSSHHost {
		h := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "h-"},
			Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: "10.0.0.1", CredentialsSecretRef: infrav1.SecretReference{Name: "s"},
				HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"}}}
		mut(h)
		return h
	}
	err := env.Create(ctx, host(func(h *infrav1.YonderSSHHost) { h.Spec.CredentialsSecretRef.Namespace = "elsewhere" }))
	g.Expect(err).To(MatchError(ContainSubstring("must be in the object's namespace")))
	err = env.Create(ctx, host(func(h *infrav1.YonderSSHHost) { h.Spec.HostKey = "not a key" }))
	g.Expect(err).To(MatchError(ContainSubstring("authorized_keys format")))
	err = env.Create(ctx, host(func(h *infrav1.YonderSSHHost) { h.Spec.HostKey = "" }))
	g.Expect(err).To(MatchError(ContainSubstring("TrustOnFirstUse")))
	g.Expect(env.Create(ctx, host(func(h *infrav1.YonderSSHHost) {
		h.Spec.HostKey = ""
		h.Spec.HostKeyPolicy = infrav1.HostKeyPolicyTrustOnFirstUse
	}))).To(Succeed())
	err = env.Create(ctx, host(func(h *infrav1.YonderSSHHost) { h.Spec.Port = 70000 }))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err).To(MatchError(ContainSubstring("spec.port")))

	h := host(func(*infrav1.YonderSSHHost) {})
	g.Expect(env.Create(ctx, h)).To(Succeed())
	h.Spec.ConsumerRef = &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: "a", UID: "1"}
	g.Expect(env.Update(ctx, h)).To(Succeed())
	h.Spec.ConsumerRef = &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: "b", UID: "2"}
	g.Expect(env.Update(ctx, h)).To(MatchError(ContainSubstring("must be released before another machine claims it")))

	bad := infrav1.HostSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
	err = env.Create(ctx, &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}, Spec: infrav1.YonderSSHMachineSpec{HostSelector: bad}})
	g.Expect(err).To(MatchError(ContainSubstring("not a valid label selector")))
	tmpl := &infrav1.YonderSSHMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	tmpl.Spec.Template.Spec.HostSelector.MatchLabels = map[string]string{"x": "y"}
	g.Expect(env.Update(ctx, tmpl)).To(MatchError(ContainSubstring("immutable")))
	err = env.Create(ctx, &infrav1.YonderSSHCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}, Spec: infrav1.YonderSSHClusterSpec{HostSelector: bad}})
	g.Expect(err).To(MatchError(ContainSubstring("not a valid label selector")))
}
