package metalremediation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/metalremediation"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/webhooks/admission"
	"github.com/yonder-dev/yonder/test/harness"
)

func mustJSON(g Gomega, v any) string {
	raw, err := json.Marshal(v)
	g.Expect(err).NotTo(HaveOccurred())
	return string(raw)
}

// The Node goes NotReady; the MachineHealthCheck creates a YonderMetalRemediation for its Machine; the
// host is power-cycled by the real host controller through the emulator (off, then on: one boot from
// disk, no PXE); the Node becomes Ready again; the MachineHealthCheck deletes the remediation. The Machine,
// its providerID and its host's claim are unchanged and nothing was provisioned again.
func TestRebootBringsTheNodeBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	r := newRig(t, g, "reboot", infrav1.RemediationStrategy{Type: infrav1.RebootRemediationStrategy, RetryLimit: 2, Timeout: &metav1.Duration{Duration: 2 * time.Minute}})
	before := r.power.history()
	consumer := r.getHost(g).Spec.ConsumerRef.DeepCopy()

	r.setNodeReady(g, false)
	g.Eventually(func(g Gomega) {
		rem := r.remediation(g)
		g.Expect(rem.Status.Phase).To(Equal(infrav1.RemediationWaiting))
		g.Expect(rem.Status.RetryCount).To(BeEquivalentTo(1))
		g.Expect(rem.Status.HostRef).To(Equal(r.host))
		g.Expect(rem.Status.LastRemediated).NotTo(BeNil())
		g.Expect(condition(rem.Status.Conditions, infrav1.YonderMetalRemediationHostPowerCycledCondition)).To(HaveField("Status", metav1.ConditionTrue))
		g.Expect(r.power.history()[len(before):]).To(Equal([]string{"off", "on"}), "one hard power-off, then one power-on from the normal boot order")
		g.Expect(r.sim.State("s1").PoweredOn).To(BeTrue())
		g.Expect(rebootAnnotations(r.getHost(g))).To(BeEmpty(), "the annotation is removed once the host was seen off")
	}).Should(Succeed())
	rem := r.remediation(g)
	g.Expect(rem.Annotations).To(HaveKey(clusterctlv1.BlockMoveAnnotation), "clusterctl move waits for the attempt in flight")
	g.Expect(rem.OwnerReferences).To(ContainElement(And(HaveField("Kind", "Machine"), HaveField("UID", r.machine.UID))))
	g.Expect(rem.Spec.Strategy.RetryLimit).To(BeEquivalentTo(2), "cloned from the template")
	g.Eventually(func(g Gomega) []string {
		evs, err := harness.Events(ctx, env.Client, rem)
		g.Expect(err).NotTo(HaveOccurred())
		return evs
	}).Should(ContainElements(
		MatchRegexp(`^Normal `+metalremediation.RebootRequestedEvent+`: Power cycle 1 of 2 requested on BareMetalHost h1 \(annotation reboot\.metal3\.io/yonder-remediation-`),
		HavePrefix("Normal "+metalremediation.HostPowerCycledEvent+": BareMetalHost h1 was powered off"),
	))
	g.Expect(condition(r.onlyMachine(g).Status.Conditions, clusterv1.MachineExternallyRemediatedCondition)).To(HaveField("Reason", infrav1.YonderMetalRemediationWaitingForNodeReason))

	r.setNodeReady(g, true)
	g.Eventually(r.remediationGone).Should(Succeed())
	m := r.onlyMachine(g)
	g.Expect(m.UID).To(Equal(r.machine.UID), "the Machine was not replaced")
	g.Expect(m.DeletionTimestamp.IsZero()).To(BeTrue())
	g.Expect(condition(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition)).To(BeNil())
	g.Expect(condition(m.Status.Conditions, clusterv1.MachineExternallyRemediatedCondition)).To(BeNil(), "the finished remediation's progress is cleared")
	ms := r.metalMachines(g)
	g.Expect(ms).To(HaveLen(1))
	g.Expect(ms[0].Spec.ProviderID).To(Equal(r.providerID))
	h := r.getHost(g)
	g.Expect(h.Spec.ConsumerRef).To(Equal(consumer))
	g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	g.Expect(r.sim.State("s1").PXEBoots).To(BeZero(), "not provisioned again")
	g.Consistently(func() []string { return r.power.history()[len(before):] }, 2*time.Second).Should(Equal([]string{"off", "on"}))
}

// The Node stays NotReady: the host is power-cycled retryLimit times, timeout apart; then the Machine is
// marked OwnerRemediated=False and its MachineSet deletes and replaces it. The old Machine's host is
// deprovisioned and claimed by the replacement.
func TestRetriesExhaustedReplaceTheMachine(t *testing.T) {
	g := NewWithT(t)
	r := newRig(t, g, "exhaust", infrav1.RemediationStrategy{RetryLimit: 2, Timeout: &metav1.Duration{Duration: 10 * time.Second}})
	before := r.power.history()

	r.setNodeReady(g, false)
	var rem *infrav1.YonderMetalRemediation
	g.Eventually(func(g Gomega) {
		rem = r.remediation(g)
		g.Expect(rem.Status.Phase).To(Equal(infrav1.RemediationDeleting))
	}, 90*time.Second).Should(Succeed())
	g.Expect(rem.Status.RetryCount).To(BeEquivalentTo(2))
	c := condition(rem.Status.Conditions, infrav1.YonderMetalRemediationMachineReplacementRequestedCondition)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(infrav1.YonderMetalRemediationRetriesExhaustedReason))
	g.Expect(c.Message).To(ContainSubstring("not healthy within 10s of any of 2 power cycles of BareMetalHost h1"))
	cycles := r.power.history()[len(before):]
	g.Expect(count(cycles, "off")).To(Equal(2), "two power cycles: %v", cycles)
	g.Expect(cycles[:4]).To(Equal([]string{"off", "on", "off", "on"}))
	// The Event is sent by the recorder's own goroutine, not with the status patch just seen: waited for.
	g.Eventually(func(g Gomega) []string {
		evs, err := harness.Events(context.Background(), env.Client, rem)
		g.Expect(err).NotTo(HaveOccurred())
		return evs
	}).Should(ContainElement(HavePrefix("Warning " + metalremediation.RemediationFailedEvent + ": The Node was not healthy within 10s")))

	// The MachineSet replaces the Machine; the host goes back to the pool and to the replacement.
	g.Eventually(func(g Gomega) {
		ms := r.machines(g)
		g.Expect(ms).To(HaveLen(1))
		g.Expect(ms[0].UID).NotTo(Equal(r.machine.UID))
		ymms := r.metalMachines(g)
		g.Expect(ymms).To(HaveLen(1))
		g.Expect(ymms[0].Status.HostRef).To(Equal(r.host))
		g.Expect(r.getHost(g).Spec.ConsumerRef.UID).To(Equal(ymms[0].UID))
	}, 90*time.Second).Should(Succeed())
	g.Expect(r.power.history()[len(before):]).To(ContainElement("off"), "deprovisioned in between")
	g.Expect(rebootAnnotations(r.getHost(g))).To(BeEmpty(), "the host is not held off for the replacement")
}

// The provider is stopped and restarted while a power cycle is under way: once with the annotation on
// the host and the host controller stopped (the host still on), once after the host was cycled and the
// annotation removed. Neither restart requests the attempt again: one power-off, one power-on, one
// attempt counted.
func TestRestartDoesNotRebootTwice(t *testing.T) {
	g := NewWithT(t)
	r := newRig(t, g, "restart", infrav1.RemediationStrategy{RetryLimit: 3, Timeout: &metav1.Duration{Duration: 2 * time.Minute}})
	before := r.power.history()
	r.hostController.Stop() // the host stays on with the annotation: the attempt stays Running

	r.setNodeReady(g, false)
	var key string
	g.Eventually(func(g Gomega) {
		rem := r.remediation(g)
		g.Expect(rem.Status.Phase).To(Equal(infrav1.RemediationRunning))
		keys := rebootAnnotations(r.getHost(g))
		g.Expect(keys).To(HaveLen(1))
		key = keys[0]
		g.Expect(key).To(Equal(metal3v1.RebootAnnotationPrefix + "/yonder-remediation-" + string(rem.UID) + "-1"))
		g.Expect(r.getHost(g).Annotations[key]).To(Equal(`{"mode":"hard"}`))
	}).Should(Succeed())
	r.provider.Kill()
	r.provider = startProvider(t)
	g.Consistently(func(g Gomega) {
		rem := r.remediation(g)
		g.Expect(rem.Status.RetryCount).To(BeEquivalentTo(1))
		g.Expect(rem.Status.Phase).To(Equal(infrav1.RemediationRunning))
		g.Expect(rebootAnnotations(r.getHost(g))).To(ConsistOf(key))
	}, 3*time.Second).Should(Succeed())

	r.hostController = startHostController(t, r.ns)
	g.Eventually(func(g Gomega) {
		g.Expect(r.remediation(g).Status.Phase).To(Equal(infrav1.RemediationWaiting))
		g.Expect(rebootAnnotations(r.getHost(g))).To(BeEmpty())
		g.Expect(r.power.history()[len(before):]).To(Equal([]string{"off", "on"}))
	}).Should(Succeed())
	r.provider.Kill()
	r.provider = startProvider(t)
	g.Consistently(func(g Gomega) {
		rem := r.remediation(g)
		g.Expect(rem.Status.RetryCount).To(BeEquivalentTo(1))
		g.Expect(rem.Status.Phase).To(Equal(infrav1.RemediationWaiting))
		g.Expect(rebootAnnotations(r.getHost(g))).To(BeEmpty())
		g.Expect(r.power.history()[len(before):]).To(Equal([]string{"off", "on"}))
	}, 3*time.Second).Should(Succeed())

	r.setNodeReady(g, true)
	g.Eventually(r.remediationGone).Should(Succeed())
	g.Expect(r.onlyMachine(g).UID).To(Equal(r.machine.UID))
}

// The API server refuses a strategy other than Reboot, retryLimit 0 and a timeout below 10s (negative
// included), for remediations and templates, with messages that say what to write; a template written
// without a strategy gets Metal3Remediation's defaults; a remediation's spec cannot change.
func TestAPIServerRejectsBadStrategies(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "validation").Name
	obj := func(kind, name string, strategy map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(infrav1.GroupVersion.String())
		u.SetKind(kind)
		u.SetNamespace(ns)
		u.SetName(name)
		spec := map[string]any{"strategy": strategy}
		if kind == "YonderMetalRemediationTemplate" {
			spec = map[string]any{"template": map[string]any{"spec": spec}}
		}
		u.Object["spec"] = spec
		return u
	}
	for _, kind := range []string{"YonderMetalRemediation", "YonderMetalRemediationTemplate"} {
		for _, tc := range []struct {
			name     string
			strategy map[string]any
			want     []string
		}{
			{"type", map[string]any{"type": "Rebuild"}, []string{"strategy.type", `Unsupported value: "Rebuild"`, `"Reboot"`}},
			{"retries", map[string]any{"retryLimit": int64(0)}, []string{"strategy.retryLimit", "should be greater than or equal to 1"}},
			{"negative", map[string]any{"timeout": "-1m"}, []string{"strategy.timeout", "timeout must be a duration of at least 10s (e.g. 10m)"}},
			{"short", map[string]any{"timeout": "5s"}, []string{"strategy.timeout", "at least 10s"}},
		} {
			err := env.Create(ctx, obj(kind, "bad-"+tc.name, tc.strategy))
			g.Expect(err).To(HaveOccurred(), "%s %s", kind, tc.name)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w), "%s %s", kind, tc.name)
			}
		}
	}
	// The webhook says the same for a Go object that reaches it (the schema's rules already passed).
	_, err := admission.YonderMetalRemediation().ValidateCreate(ctx, &infrav1.YonderMetalRemediation{ObjectMeta: metav1.ObjectMeta{Name: "direct"},
		Spec: infrav1.YonderMetalRemediationSpec{Strategy: infrav1.RemediationStrategy{Type: "Rebuild", RetryLimit: 11, Timeout: &metav1.Duration{Duration: -time.Minute}}}})
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(And(ContainSubstring(`spec.strategy.type: Unsupported value: "Rebuild"`),
		ContainSubstring("spec.strategy.retryLimit: Invalid value: 11: must be between 1 and 10"),
		ContainSubstring(`spec.strategy.timeout: Invalid value: "-1m0s": must be at least 10s`)))

	tmpl := &infrav1.YonderMetalRemediationTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaults"}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	g.Expect(tmpl.Spec.Template.Spec.Strategy).To(Equal(infrav1.RemediationStrategy{Type: infrav1.RebootRemediationStrategy, RetryLimit: 1,
		Timeout: &metav1.Duration{Duration: 10 * time.Minute}}))

	rem := &infrav1.YonderMetalRemediation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fixed"},
		Spec: infrav1.YonderMetalRemediationSpec{Strategy: infrav1.RemediationStrategy{RetryLimit: 2}}}
	g.Expect(env.Create(ctx, rem)).To(Succeed())
	g.Expect(rem.Spec.Strategy.Timeout).To(Equal(&metav1.Duration{Duration: 10 * time.Minute}))
	rem.Spec.Strategy.RetryLimit = 3
	err = env.Update(ctx, rem)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("spec: Forbidden: is immutable: change the YonderMetalRemediationTemplate"))
}

// A Machine whose YonderMetalMachine has no host (none matches its selector) has nothing to power-cycle:
// its remediation (created as the MachineHealthCheck creates one: named after the Machine, owned by it)
// goes straight to replacement and says why, on itself, on the Machine and in a Warning Event.
func TestMachineWithoutHostIsReplacedAtOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	r, want := remediateMachineWithoutHost(t, g, "nohost")
	g.Eventually(func(g Gomega) {
		rem := r.remediation(g)
		g.Expect(rem.Status.Phase).To(Equal(infrav1.RemediationDeleting))
		g.Expect(rem.Status.RetryCount).To(BeZero())
		g.Expect(rem.Annotations).NotTo(HaveKey(clusterctlv1.BlockMoveAnnotation))
		c := condition(rem.Status.Conditions, infrav1.YonderMetalRemediationMachineReplacementRequestedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.YonderMetalRemediationNoHostReason))
		g.Expect(c.Message).To(ContainSubstring(want))
		m := r.onlyMachine(g)
		owner := condition(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition)
		g.Expect(owner).NotTo(BeNil())
		g.Expect(owner.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(owner.Reason).To(Equal(clusterv1.MachineOwnerRemediatedWaitingForRemediationReason))
		g.Expect(owner.Message).To(ContainSubstring(want))
		g.Expect(condition(m.Status.Conditions, clusterv1.MachineExternallyRemediatedCondition)).To(HaveField("Reason", infrav1.YonderMetalRemediationReplacementRequestedReason))
		evs, err := harness.Events(ctx, env.Client, rem)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(evs).To(ContainElement("Warning " + metalremediation.RemediationFailedEvent + ": " + want + "; requesting replacement of Machine " + r.machine.Name))
	}).Should(Succeed())
}

// A remediation stays in phase Deleting until the Machine's owner replaces the Machine, and every event
// in between is a pass that requests the replacement again: each pass must write the same message. One
// that grew by the replacement's suffix per pass (fixed in 6e4acf8) passed the API server's 32 KiB limit,
// after which no patch of the Machine or the remediation succeeded and the Machine was never replaced.
// Without a MachineHealthCheck (no HealthCheckSucceeded=False) the MachineSet never replaces the Machine,
// so the phase lasts. Each pass is set off by putting clusterctl's block-move annotation on the
// remediation, which a pass in this phase takes off again: its removal shows that the pass ran.
func TestReplacementRequestWritesOneMessageOnEveryPass(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	r, want := remediateMachineWithoutHost(t, g, "samemsg")
	suffix := ": Machine " + r.machine.Name + " is marked OwnerRemediated=False for its owner to replace"
	// expect checks the messages after the pass named by after.
	expect := func(after string) func(Gomega) {
		return func(g Gomega) {
			rem := r.remediation(g)
			g.Expect(rem.Status.Phase).To(Equal(infrav1.RemediationDeleting), after)
			c := condition(rem.Status.Conditions, infrav1.YonderMetalRemediationMachineReplacementRequestedCondition)
			g.Expect(c).NotTo(BeNil(), after)
			g.Expect(strings.Count(c.Message, suffix)).To(Equal(1), "%s: the replacement's suffix, once (a message of %d bytes)", after, len(c.Message))
			g.Expect(c.Message).To(HaveLen(len(want+suffix)), "%s: the message's length", after)
			g.Expect(c.Message).To(Equal(want+suffix), after)
			m := condition(r.onlyMachine(g).Status.Conditions, clusterv1.MachineExternallyRemediatedCondition)
			g.Expect(m).NotTo(BeNil(), after)
			g.Expect(m.Message).To(Equal(want+": replacement requested"), "%s: the Machine's condition, with no suffix of the remediation's", after)
		}
	}
	g.Eventually(expect("the request")).Should(Succeed())
	for pass := 1; pass <= 5; pass++ {
		rem := r.remediation(g)
		orig := rem.DeepCopy()
		if rem.Annotations == nil {
			rem.Annotations = map[string]string{}
		}
		rem.Annotations[clusterctlv1.BlockMoveAnnotation] = "true"
		g.Expect(env.Patch(ctx, rem, client.MergeFrom(orig))).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(r.remediation(g).Annotations).NotTo(HaveKey(clusterctlv1.BlockMoveAnnotation))
		}).Should(Succeed(), "pass %d ran", pass)
		expect(fmt.Sprintf("pass %d", pass))(g)
	}
	// The last pass's status patch lands after its metadata patch (that took the annotation off): a message
	// it grew would show within this window.
	g.Consistently(expect("the last pass"), 2*time.Second).Should(Succeed())
}

// The MachineHealthCheck creates a remediation and only then records the Machine as unhealthy
// (HealthCheckSucceeded=False, which the MachineSet needs besides OwnerRemediated=False to replace it). A
// first pass that wrote the Machine's ExternallyRemediated condition in between made that record fail on a
// condition conflict, and the MachineHealthCheck does not write it again once the remediation exists: a CI
// run's remediation exhausted its power cycles, marked the Machine OwnerRemediated=False, and the MachineSet
// never replaced it. A remediation now leaves its Machine alone until the record is there (here made by
// hand and recorded by hand, the provider's bound on that wait an hour), and then goes on: the Machine,
// with no host to power-cycle, is replaced.
func TestFirstWriteWaitsForTheHealthCheckRecord(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	r, _ := remediateMachineWithoutHost(t, g, "mhcrecord", func(o *setup.Options) { o.RemediationHealthCheckRecordWait = time.Hour })
	g.Consistently(func(g Gomega) {
		g.Expect(r.remediation(g).Status.Phase).To(BeEmpty(), "the remediation started before the MachineHealthCheck's record")
		g.Expect(condition(r.onlyMachine(g).Status.Conditions, clusterv1.MachineExternallyRemediatedCondition)).To(BeNil(), "the Machine was written before the MachineHealthCheck's record")
	}, 3*time.Second).Should(Succeed())

	// The record, written as the MachineHealthCheck writes it (its own condition only).
	m := r.onlyMachine(g)
	h, err := patch.NewHelper(m, env.Client)
	g.Expect(err).NotTo(HaveOccurred())
	conditions.Set(m, metav1.Condition{Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionFalse,
		Reason: clusterv1.MachineHealthCheckUnhealthyNodeReason, Message: "Condition Ready on Node is reporting status False"})
	g.Expect(h.Patch(ctx, m, patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineHealthCheckSucceededCondition}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		ms := r.machines(g)
		g.Expect(ms).To(HaveLen(1))
		g.Expect(ms[0].UID).NotTo(Equal(r.machine.UID), "the MachineSet replaced the Machine")
	}).Should(Succeed())
}

// remediateMachineWithoutHost makes a Machine (a MachineDeployment of 1) whose YonderMetalMachine has no
// host, none matching its selector, and creates the Machine's remediation as the MachineHealthCheck creates
// one: named after the Machine, owned by it. It returns the message the remediation gives up with. mods
// change the provider's options.
func remediateMachineWithoutHost(t *testing.T, g *WithT, name string, mods ...func(*setup.Options)) (_ *rig, want string) {
	t.Helper()
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, name).Name
	cluster := attachedCluster(t, g, ns, name)
	startProvider(t, mods...)
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: infrav1.YonderMetalMachineSpec{
			Image:        &infrav1.Image{URL: "http://images.example/yonder-live.iso", Format: infrav1.LiveISOFormat},
			HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"pool": "nowhere"}},
		}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	harness.MachineDeployment(g, env, harness.MachineDeploymentOptions{Namespace: ns, Name: name, Cluster: cluster.Name,
		Replicas: 1, Labels: map[string]string{"md": name}, DataSecret: name + "-join",
		Infrastructure: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderMetalMachineTemplate", Name: tmpl.Name}})
	r := &rig{ns: ns}
	g.Eventually(func(g Gomega) {
		ymms := r.metalMachines(g)
		g.Expect(ymms).To(HaveLen(1))
		c := condition(ymms[0].Status.Conditions, infrav1.YonderMetalMachineHostClaimedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.YonderMetalMachineNoHostAvailableReason))
		r.machine = r.onlyMachine(g)
	}).Should(Succeed())

	g.Expect(env.Create(ctx, &infrav1.YonderMetalRemediation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: r.machine.Name,
		Labels:          map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: r.machine.Name, UID: r.machine.UID}}}})).To(Succeed())
	return r, "YonderMetalMachine " + r.machine.Name + " has not claimed a BareMetalHost yet: nothing to power-cycle"
}

// A diskless Machine (customDeploy yonder-diskless) lost its Node for good when its host rebooted: its
// remediation power-cycles nothing and requests the replacement at once, saying why on itself, on the
// Machine and in a Warning Event. The MachineSet replaces the Machine, and the host (deprovisioned: powered
// off, nothing to clean) is claimed by the replacement.
func TestDisklessMachineIsReplacedWithoutReboot(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	r := newRig(t, g, "diskless", infrav1.RemediationStrategy{RetryLimit: 2, Timeout: &metav1.Duration{Duration: 2 * time.Minute}},
		func(s *infrav1.YonderMetalMachineSpec) {
			s.Image, s.CustomDeploy = nil, &infrav1.CustomDeploy{Method: infrav1.DisklessDeployMethod}
			s.AutomatedCleaningMode = "metadata" // nothing was written: still no cleaning boot
		})
	g.Expect(r.getHost(g).Spec.CustomDeploy).To(Equal(&metal3v1.CustomDeploy{Method: infrav1.DisklessDeployMethod}), "the machine hands its custom deploy to the host")

	r.setNodeReady(g, false)
	want := "YonderMetalMachine " + r.metalMachines(g)[0].Name + " runs diskless (customDeploy yonder-diskless): its Node lived in the host's memory and a power cycle cannot bring it back"
	var rem *infrav1.YonderMetalRemediation
	g.Eventually(func(g Gomega) {
		rem = r.remediation(g)
		g.Expect(rem.Status.Phase).To(Equal(infrav1.RemediationDeleting))
		c := condition(rem.Status.Conditions, infrav1.YonderMetalRemediationMachineReplacementRequestedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(infrav1.YonderMetalRemediationDisklessHostReason))
		g.Expect(c.Message).To(ContainSubstring(want))
	}, 30*time.Second).Should(Succeed())
	g.Expect(rem.Status.RetryCount).To(BeZero(), "no power cycle")
	g.Expect(condition(rem.Status.Conditions, infrav1.YonderMetalRemediationHostPowerCycledCondition)).To(BeNil())
	g.Eventually(func(g Gomega) {
		evs, err := harness.Events(ctx, env.Client, rem)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(evs).To(ContainElement(HavePrefix("Warning " + metalremediation.RemediationFailedEvent + ": " + want)))
		g.Expect(evs).NotTo(ContainElement(HavePrefix("Normal " + metalremediation.RebootRequestedEvent)))
	}).Should(Succeed())

	g.Eventually(func(g Gomega) {
		ms := r.machines(g)
		g.Expect(ms).To(HaveLen(1))
		g.Expect(ms[0].UID).NotTo(Equal(r.machine.UID))
		ymms := r.metalMachines(g)
		g.Expect(ymms).To(HaveLen(1))
		g.Expect(ymms[0].Status.HostRef).To(Equal(r.host))
		g.Expect(r.getHost(g).Spec.ConsumerRef.UID).To(Equal(ymms[0].UID))
	}, 90*time.Second).Should(Succeed())
	g.Expect(rebootAnnotations(r.getHost(g))).To(BeEmpty(), "the host was never asked to reboot")
	g.Expect(r.sim.State("s1").PXEBoots).To(BeNumerically("<=", 1), "no cleaning boot: at most the replacement's provisioning boot")
}

// The Node recovers on its own while an attempt is pending (the annotation is on, the host controller has
// not acted yet): the MachineHealthCheck deletes the remediation, which takes its annotation off the host
// before it goes. The host is never left held off, and the host controller, back, has nothing to do.
func TestDeletedRemediationReleasesTheHost(t *testing.T) {
	g := NewWithT(t)
	r := newRig(t, g, "release", infrav1.RemediationStrategy{RetryLimit: 1, Timeout: &metav1.Duration{Duration: 2 * time.Minute}})
	before := r.power.history()
	r.hostController.Stop()

	r.setNodeReady(g, false)
	g.Eventually(func(g Gomega) {
		g.Expect(r.remediation(g).Status.Phase).To(Equal(infrav1.RemediationRunning))
		g.Expect(rebootAnnotations(r.getHost(g))).To(HaveLen(1))
	}).Should(Succeed())
	r.setNodeReady(g, true)
	g.Eventually(r.remediationGone).Should(Succeed())
	g.Expect(rebootAnnotations(r.getHost(g))).To(BeEmpty())

	r.hostController = startHostController(t, r.ns)
	g.Consistently(func() []string { return r.power.history()[len(before):] }, 3*time.Second).Should(BeEmpty(), "no power action for a withdrawn request")
	g.Expect(r.sim.State("s1").PoweredOn).To(BeTrue())
}
