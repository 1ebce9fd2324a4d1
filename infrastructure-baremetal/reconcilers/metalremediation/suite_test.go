package metalremediation_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

var (
	env *envtest.Environment
	wl  = &harness.Workload{Name: "remediation-wl"}
	// hostSeq makes every test's boot MAC unique: the host webhook wants them unique across namespaces.
	hostSeq atomic.Int32
)

func TestMain(m *testing.M) {
	harness.UnlimitedCAPIReconcilers() // the MHC's 15 s interval was most of this package's time (two Node transitions per test)
	harness.Main(m, 90*time.Second, 100*time.Millisecond, harness.Providers("metal"), func(e *envtest.Environment) { env = e }, wl)
}

// startProvider runs the bare-metal provider's reconcilers (machines, clusters, remediations) as main.go
// wires them, without Yonder's host controller (started apart, startHostController); mods change the
// options.
func startProvider(t testing.TB, mods ...func(*setup.Options)) *harness.Provider {
	t.Helper()
	o := setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}}
	for _, mod := range mods {
		mod(&o)
	}
	return harness.StartProvider(t, env.Config, env.GetScheme(), setup.Reconcilers(o))
}

// startHostController runs Yonder's real BareMetalHost controller, limited to ns, in a manager of its own
// (a test stops it to hold a host in a state). Its boot services are an empty inventory: nothing answers
// a PXE boot, so a host claimed again after a replacement does not finish provisioning.
func startHostController(t testing.TB, ns string) *harness.Provider {
	t.Helper()
	return harness.StartProvider(t, env.Config, env.GetScheme(), func(ctx context.Context, mgr ctrl.Manager) error {
		r := &baremetalhost.Reconciler{Client: mgr.GetClient(), NetBoot: inventory.NewStatic(), Namespaces: []string{ns},
			Boot:             inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img"},
			ProvisionTimeout: 2 * time.Second, MaxProvisionAttempts: 1, RetryInterval: 500 * time.Millisecond, PowerPollInterval: 500 * time.Millisecond}
		return r.SetupWithManager(ctx, mgr, manager.Controllers{SkipNameValidation: true}.Options(2))
	})
}

// powerLog is the machine behind the Redfish emulator's system: it records every power change the BMC
// carries out, in order ("on", "on:Pxe", "off").
type powerLog struct {
	mu     sync.Mutex
	events []string
}

func (p *powerLog) PowerOn(_ context.Context, _, target string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, strings.TrimSuffix("on:"+target, ":"))
	return nil
}

func (p *powerLog) PowerOff(context.Context, string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "off")
	return nil
}

func (p *powerLog) history() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.events...)
}

// rig is one bare-metal Machine running on a real-host-controller-managed BareMetalHost behind the Redfish
// emulator, in a MachineDeployment of 1, watched by a MachineHealthCheck whose remediation is a
// YonderMetalRemediationTemplate with the given strategy.
type rig struct {
	ns, host, node string
	sim            *redfishsim.Server
	power          *powerLog
	hostController *harness.Provider
	provider       *harness.Provider
	wlc            client.Client
	machine        *clusterv1.Machine
	providerID     string
}

const bmcUser, bmcPass = "admin", "s3cret"

// spec changes the machine template's spec (e.g. diskless instead of the live image).
func newRig(t *testing.T, g *WithT, name string, strategy infrav1.RemediationStrategy, spec ...func(*infrav1.YonderMetalMachineSpec)) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{ns: env.CreateNamespace(ctx, t, name).Name, host: "h1", power: &powerLog{}}
	var err error
	r.sim, err = redfishsim.Start(redfishsim.Options{Username: bmcUser, Password: bmcPass, Driver: r.power})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(r.sim.Close)
	n := hostSeq.Add(1)
	mac := fmt.Sprintf("52:54:00:61:%02x:%02x", n/256, n%256)
	r.sim.AddSystem(redfishsim.DefaultSystem("s1", mac))
	r.wlc, err = wl.Get(t).Client()
	g.Expect(err).NotTo(HaveOccurred())

	// The host as the host controller leaves it after registration and inspection, but not yet under its
	// management (no managed label): provisioning is stood in for below, since nothing here answers a
	// PXE boot.
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "bmc"},
		Data: map[string][]byte{"username": []byte(bmcUser), "password": []byte(bmcPass)}})).To(Succeed())
	h := &metal3v1.BareMetalHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.host, Labels: map[string]string{"pool": name}},
		Spec:       metal3v1.BareMetalHostSpec{BMC: metal3v1.BMCDetails{Address: r.sim.Address("s1"), CredentialsName: "bmc"}, BootMACAddress: mac},
	}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	h.Status = metal3v1.BareMetalHostStatus{
		OperationalStatus: metal3v1.OperationalStatusOK,
		Provisioning:      metal3v1.ProvisionStatus{State: metal3v1.StateAvailable, ID: string(h.UID)},
		HardwareDetails: &metal3v1.HardwareDetails{Hostname: r.host, RAMMebibytes: 4096,
			NIC: []metal3v1.NIC{{Name: "eth0", MAC: mac, IP: "10.61.0.2", PXE: true}}},
	}
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())
	r.hostController = startHostController(t, r.ns)

	cluster := attachedCluster(t, g, r.ns, name)
	r.provider = startProvider(t)
	data := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name + "-join", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Type: clusterv1.ClusterSecretType, Data: map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")}}
	g.Expect(env.Create(ctx, data)).To(Succeed())
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: infrav1.YonderMetalMachineSpec{
			Image: &infrav1.Image{URL: "http://images.example/node.qcow2", Checksum: "0123abcd", ChecksumType: "sha256", Format: "qcow2"}, AutomatedCleaningMode: "disabled",
			HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"pool": name}},
		}}}}
	for _, mod := range spec {
		mod(&tmpl.Spec.Template.Spec)
	}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	harness.MachineDeployment(g, env, harness.MachineDeploymentOptions{Namespace: r.ns, Name: name, Cluster: cluster.Name,
		Replicas: 1, Labels: map[string]string{"md": name}, DataSecret: data.Name,
		Infrastructure: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderMetalMachineTemplate", Name: tmpl.Name}})

	r.provisionByHand(g)
	r.node = r.ns + "-" + r.host
	g.Eventually(func(g Gomega) {
		ms := r.metalMachines(g)
		g.Expect(ms).To(HaveLen(1))
		g.Expect(ms[0].Spec.ProviderID).NotTo(BeEmpty())
		r.providerID = ms[0].Spec.ProviderID
	}).Should(Succeed())
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.node}, Spec: corev1.NodeSpec{ProviderID: r.providerID}}
	g.Expect(r.wlc.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = r.wlc.Delete(context.Background(), node) })
	r.setNodeReady(g, true)
	g.Eventually(func(g Gomega) {
		m := r.onlyMachine(g)
		g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s: %v", m.Name, m.Status.Conditions)
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue())
		r.machine = m
	}).Should(Succeed())
	g.Eventually(func() bool { return r.sim.State("s1").PoweredOn }).Should(BeTrue(), "the host controller powers the provisioned host on")

	g.Expect(env.Create(ctx, &infrav1.YonderMetalRemediationTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "reboot"},
		Spec: infrav1.YonderMetalRemediationTemplateSpec{Template: infrav1.YonderMetalRemediationTemplateResource{
			Spec: infrav1.YonderMetalRemediationSpec{Strategy: strategy}}}})).To(Succeed())
	g.Expect(env.Create(ctx, &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: cluster.Name,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{"md": name}},
			Checks: clusterv1.MachineHealthCheckChecks{UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](1)},
			}},
			Remediation: clusterv1.MachineHealthCheckRemediation{TemplateRef: clusterv1.MachineHealthCheckRemediationTemplateReference{
				APIVersion: infrav1.GroupVersion.String(), Kind: "YonderMetalRemediationTemplate", Name: "reboot"}},
		},
	})).To(Succeed())
	return r
}

// attachedCluster creates a Cluster on a YonderMetalCluster whose control plane is the workload apiserver,
// its infrastructure provisioned by a provider run just for that.
func attachedCluster(t testing.TB, g *WithT, ns, name string) *clusterv1.Cluster {
	t.Helper()
	p := startProvider(t)
	defer p.Stop()
	return harness.AttachedCluster(t, g, env.Client, wl.Get(t), harness.ClusterOptions{Namespace: ns, Name: name, WaitForInfrastructure: true,
		Infrastructure: &infrav1.YonderMetalCluster{Spec: infrav1.YonderMetalClusterSpec{ControlPlaneEndpoint: harness.Endpoint(wl.Get(t))}}})
}

// provisionByHand stands in for the provisioning boot nothing here can answer: once the Machine's
// YonderMetalMachine has claimed the host and handed it its image (or the diskless custom deploy), the
// host is written as the host controller writes a host it provisioned (status and its durable state
// annotation) and put under the real host controller's management, which from then on drives its power
// through the emulator.
func (r *rig) provisionByHand(g *WithT) {
	ctx := context.Background()
	var h *metal3v1.BareMetalHost
	g.Eventually(func(g Gomega) {
		h = r.getHost(g)
		g.Expect(h.Spec.ConsumerRef).NotTo(BeNil())
		g.Expect(h.Spec.Image != nil || h.Spec.CustomDeploy != nil).To(BeTrue())
	}).Should(Succeed())
	st := baremetalhost.HostState{State: metal3v1.StateProvisioned, Image: h.Spec.Image.DeepCopy(), CustomDeploy: h.Spec.CustomDeploy.DeepCopy()}
	h.Status.Provisioning.State = metal3v1.StateProvisioned
	h.Status.Provisioning.Image = ptr.Deref(st.Image, metal3v1.Image{})
	h.Status.Provisioning.CustomDeploy = st.CustomDeploy.DeepCopy()
	h.Status.PoweredOn = true
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())
	h = r.getHost(g)
	orig := h.DeepCopy()
	h.Labels[baremetalhost.ManagedLabel] = "true"
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	h.Annotations[baremetalhost.StateAnnotation] = mustJSON(g, st)
	g.Expect(env.Patch(ctx, h, client.MergeFrom(orig))).To(Succeed())
}

func (r *rig) getHost(g Gomega) *metal3v1.BareMetalHost {
	h := &metal3v1.BareMetalHost{}
	g.Expect(env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: r.host}, h)).To(Succeed())
	return h
}

func (r *rig) metalMachines(g Gomega) []infrav1.YonderMetalMachine {
	l := &infrav1.YonderMetalMachineList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(r.ns))).To(Succeed())
	return l.Items
}

func (r *rig) machines(g Gomega) []clusterv1.Machine {
	l := &clusterv1.MachineList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(r.ns))).To(Succeed())
	return l.Items
}

func (r *rig) onlyMachine(g Gomega) *clusterv1.Machine {
	ms := r.machines(g)
	g.Expect(ms).To(HaveLen(1))
	return &ms[0]
}

// remediation reads the remediation the MachineHealthCheck created for the rig's Machine (named after it).
func (r *rig) remediation(g Gomega) *infrav1.YonderMetalRemediation {
	rem := &infrav1.YonderMetalRemediation{}
	g.Expect(env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: r.machine.Name}, rem)).To(Succeed())
	return rem
}

func (r *rig) remediationGone(g Gomega) {
	err := env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: r.machine.Name}, &infrav1.YonderMetalRemediation{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "remediation still there: %v", err)
}

// setNodeReady writes the Node's Ready condition as a kubelet (or, for False, the node lifecycle
// controller) would; a NotReady transition is dated a minute back so the MachineHealthCheck's timeout
// has passed.
func (r *rig) setNodeReady(g Gomega, ready bool) {
	ctx := context.Background()
	g.Eventually(func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(r.wlc.Get(ctx, client.ObjectKey{Name: r.node}, node)).To(Succeed())
		c := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}
		if !ready {
			c.Status, c.Reason, c.LastTransitionTime = corev1.ConditionFalse, "KubeletDown", metav1.NewTime(time.Now().Add(-time.Minute))
		}
		node.Status.Conditions = []corev1.NodeCondition{c}
		g.Expect(r.wlc.Status().Update(ctx, node)).To(Succeed())
	}).Should(Succeed())
}

// rebootAnnotations are the host's reboot.metal3.io annotations.
func rebootAnnotations(h *metal3v1.BareMetalHost) []string {
	var out []string
	for k := range h.Annotations {
		if k == metal3v1.RebootAnnotationPrefix || strings.HasPrefix(k, metal3v1.RebootAnnotationPrefix+"/") {
			out = append(out, k)
		}
	}
	return out
}

func condition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// count counts s in l.
func count(l []string, s string) int {
	n := 0
	for _, v := range l {
		if v == s {
			n++
		}
	}
	return n
}
