package metalmachine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/pkg/managercache"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/envtest"
)

var (
	env *envtest.Environment

	wlOnce sync.Once
	wl     *controlplane.ControlPlane
	wlErr  error
)

func TestMain(m *testing.M) {
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	code := envtest.Run(m, envtest.Options{
		CRDDirectoryPaths:    []string{"infrastructure-baremetal/config/crd/bases", "infrastructure-baremetal/config/crd/metal3"},
		WebhookManifestPaths: []string{"infrastructure-baremetal/config/webhook/manifests.yaml"},
		AddToScheme:          []func(*runtime.Scheme) error{infrav1.AddToScheme, metal3v1.AddToScheme},
		// Webhooks are served by the environment's manager; the provider's reconcilers run in their own
		// manager (startProvider) so tests can stop and restart them like a crashing controller.
		Setup: func(_ context.Context, e *envtest.Environment) error { return setup.SetupWebhooks(e.Manager) },
	}, func(e *envtest.Environment) { env = e })
	if wl != nil {
		_ = wl.Stop()
	}
	os.Exit(code)
}

// workload returns the workload cluster's control plane, shared by the tests of this package.
func workload(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	wlOnce.Do(func() { wl, wlErr = controlplane.Start(context.Background(), controlplane.Options{Name: "metal-wl"}) })
	if wlErr != nil {
		t.Fatalf("failed to start the workload control plane: %v", wlErr)
	}
	return wl
}

// provider is a running instance of the provider's reconcilers (a yonder-metal-manager).
type provider struct {
	cancel context.CancelFunc
	done   chan error
}

func testOptions() setup.Options { return setup.Options{SkipNameValidation: true} }

func startProvider(t testing.TB, o setup.Options) *provider {
	return startProviderWithConfig(t, env.Config, o)
}

// startProviderWithConfig starts the provider's reconcilers in a manager of their own, with its own
// rest config (e.g. one that counts requests).
func startProviderWithConfig(t testing.TB, cfg *rest.Config, o setup.Options) *provider {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 env.GetScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client:                 managercache.ClientOptions(),
	})
	if err != nil {
		t.Fatalf("failed to create provider manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup.SetupReconcilers(ctx, mgr, o); err != nil {
		cancel()
		t.Fatalf("failed to set up reconcilers: %v", err)
	}
	p := &provider{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- mgr.Start(ctx) }()
	t.Cleanup(p.stop)
	return p
}

// stop stops the manager (like a killed controller: in-flight reconciles see a cancelled context).
func (p *provider) stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	if err := <-p.done; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "provider manager stopped with: %v\n", err)
	}
	p.cancel = nil
}

// newCluster creates a Cluster whose control plane is the workload apiserver. The test acts as the
// control plane provider (a generic control plane object marked initialized): this provider only
// supplies workers. The cluster's infrastructure is provisioned by a provider run just for that, so
// tests that start and stop providers themselves begin with a ready Cluster.
func newCluster(t testing.TB, g *WithT, ns, name string) *clusterv1.Cluster {
	ctx := context.Background()
	cp := workload(t)
	mc := &infrav1.YonderMetalCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderMetalClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: cp.Host.String(), Port: int32(cp.Port)}}}
	g.Expect(env.Create(ctx, mc)).To(Succeed())
	gcp := &unstructured.Unstructured{}
	gcp.SetAPIVersion(builder.ControlPlaneGroupVersion.String())
	gcp.SetKind(builder.GenericControlPlaneKind)
	gcp.SetNamespace(ns)
	gcp.SetName(name)
	_ = unstructured.SetNestedMap(gcp.Object, map[string]any{}, "spec")
	g.Expect(env.Create(ctx, gcp)).To(Succeed())
	_ = unstructured.SetNestedField(gcp.Object, true, "status", "initialization", "controlPlaneInitialized")
	g.Expect(env.Status().Update(ctx, gcp)).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderMetalCluster", Name: name},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: builder.ControlPlaneGroupVersion.Group, Kind: builder.GenericControlPlaneKind, Name: name},
		},
	}
	g.Expect(env.Create(ctx, cluster)).To(Succeed())
	g.Expect(cp.WriteKubeconfigSecret(ctx, env.Client, cluster)).To(Succeed())
	p := startProvider(t, testOptions())
	defer p.stop()
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
		g.Expect(cluster.Status.Initialization.InfrastructureProvisioned).To(HaveValue(BeTrue()))
		g.Expect(cluster.Status.Initialization.ControlPlaneInitialized).To(HaveValue(BeTrue()))
	}).Should(Succeed())
	return cluster
}

// hostSpec describes one BareMetalHost to register.
type hostSpec struct {
	name, failureDomain string
	labels              map[string]string
	state               metal3v1.ProvisioningState
	paused              bool
	errorMessage        string
	consumer            *corev1.ObjectReference
}

// registerHosts creates BareMetalHosts with the status an inspected host has (what the host controller
// writes after registering and inspecting it).
func registerHosts(g Gomega, ns string, specs ...hostSpec) {
	ctx := context.Background()
	for i, s := range specs {
		h := &metal3v1.BareMetalHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name, Labels: map[string]string{}, Annotations: map[string]string{}},
			Spec: metal3v1.BareMetalHostSpec{
				BMC:            metal3v1.BMCDetails{Address: fmt.Sprintf("redfish://127.0.0.1:%d/redfish/v1/Systems/1", 8000+i), CredentialsName: "bmc"},
				BootMACAddress: fmt.Sprintf("52:54:00:00:%02x:%02x", i/256, i%256),
				ConsumerRef:    s.consumer,
			},
		}
		for k, v := range s.labels {
			h.Labels[k] = v
		}
		if s.failureDomain != "" {
			h.Labels[infrav1.FailureDomainLabel] = s.failureDomain
		}
		if s.paused {
			h.Annotations[metal3v1.PausedAnnotation] = ""
		}
		g.Expect(env.Create(ctx, h)).To(Succeed())
		st := s.state
		if st == "" {
			st = metal3v1.StateAvailable
		}
		h.Status = metal3v1.BareMetalHostStatus{
			OperationalStatus: metal3v1.OperationalStatusOK,
			Provisioning:      metal3v1.ProvisionStatus{State: st, ID: string(h.UID)},
			HardwareDetails: &metal3v1.HardwareDetails{Hostname: s.name, RAMMebibytes: 4096,
				NIC: []metal3v1.NIC{{Name: "eth0", MAC: h.Spec.BootMACAddress, IP: fmt.Sprintf("10.1.%d.%d", i/250, i%250+2), PXE: true}}},
		}
		if s.errorMessage != "" {
			h.Status.ErrorType = metal3v1.InspectionError
			h.Status.ErrorMessage = s.errorMessage
			h.Status.OperationalStatus = metal3v1.OperationalStatusError
		}
		g.Expect(env.Status().Update(ctx, h)).To(Succeed())
	}
}

// hostSimulator stands in for Yonder's BareMetalHost controller (reconcilers/baremetalhost, built by
// another part of the provider) ONLY in this package's tests. It advances host status one state per
// tick the way the host controller does: available + image + online → provisioning → provisioned
// (powered on); image withdrawn → deprovisioning → available (powered off). Paused hosts are left alone.
// It records each provisioning by consumer so tests can prove no host was provisioned twice for one
// Machine and none for two Machines at once.
type hostSimulator struct {
	mu sync.Mutex
	// hold keeps hosts in "provisioning" (to observe the block-move annotation).
	hold bool
	// holdDeprovision keeps hosts in "deprovisioning" (to observe that a host is released only once it is
	// available again: a test that merely polls for the transient state can miss it on a loaded machine).
	holdDeprovision bool
	// fail makes provisioning of the named host fail with this message.
	fail map[string]string
	// provisioned counts, per host and consumer UID, how often provisioning started.
	provisioned map[string]map[string]int
}

// simulateHostController starts the simulator for namespace ns until the test ends.
func simulateHostController(t testing.TB, ns string) *hostSimulator {
	s := &hostSimulator{fail: map[string]string{}, provisioned: map[string]map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.step(ctx, ns)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func (s *hostSimulator) setHold(v bool) { s.mu.Lock(); s.hold = v; s.mu.Unlock() }

func (s *hostSimulator) setHoldDeprovision(v bool) { s.mu.Lock(); s.holdDeprovision = v; s.mu.Unlock() }

func (s *hostSimulator) setFail(host, msg string) { s.mu.Lock(); s.fail[host] = msg; s.mu.Unlock() }

// provisionings returns a copy of the provisioning record.
func (s *hostSimulator) provisionings() map[string]map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]int{}
	for h, m := range s.provisioned {
		out[h] = map[string]int{}
		for k, v := range m {
			out[h][k] = v
		}
	}
	return out
}

func (s *hostSimulator) step(ctx context.Context, ns string) {
	list := &metal3v1.BareMetalHostList{}
	if err := env.GetAPIReader().List(ctx, list, client.InNamespace(ns)); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range list.Items {
		h := &list.Items[i]
		if _, ok := h.Annotations[metal3v1.PausedAnnotation]; ok {
			continue
		}
		st := &h.Status
		deploy := h.Spec.Image != nil || h.Spec.CustomDeploy != nil
		switch {
		case st.Provisioning.State == metal3v1.StateAvailable && deploy && h.Spec.Online && h.Spec.ConsumerRef != nil && st.ErrorType == "":
			st.Provisioning.State = metal3v1.StateProvisioning
			if s.provisioned[h.Name] == nil {
				s.provisioned[h.Name] = map[string]int{}
			}
			s.provisioned[h.Name][string(h.Spec.ConsumerRef.UID)]++
		case st.Provisioning.State == metal3v1.StateProvisioning && deploy && s.fail[h.Name] != "":
			st.ErrorType, st.ErrorMessage, st.OperationalStatus = metal3v1.ProvisioningError, s.fail[h.Name], metal3v1.OperationalStatusError
		case st.Provisioning.State == metal3v1.StateProvisioning && deploy && !s.hold:
			st.Provisioning.State, st.PoweredOn = metal3v1.StateProvisioned, true
			if h.Spec.Image != nil {
				st.Provisioning.Image = *h.Spec.Image
			}
		case (st.Provisioning.State == metal3v1.StateProvisioned || st.Provisioning.State == metal3v1.StateProvisioning) && !deploy:
			st.Provisioning.State = metal3v1.StateDeprovisioning
			st.ErrorType, st.ErrorMessage, st.OperationalStatus = "", "", metal3v1.OperationalStatusOK
		case st.Provisioning.State == metal3v1.StateDeprovisioning && !s.holdDeprovision:
			st.Provisioning.State, st.PoweredOn, st.Provisioning.Image = metal3v1.StateAvailable, h.Spec.Online, metal3v1.Image{}
		default:
			continue
		}
		_ = env.Status().Update(ctx, h)
	}
}

// dataSecret creates a bootstrap data Secret (value + format) as a bootstrap provider does.
func dataSecret(g Gomega, ns, name, cluster string) *corev1.Secret {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")},
	}
	g.Expect(env.Create(context.Background(), sec)).To(Succeed())
	return sec
}

func testImage() *infrav1.Image {
	return &infrav1.Image{URL: "http://images.example/node.qcow2", Checksum: "0123456789abcdef0123456789abcdef", ChecksumType: "md5", Format: "qcow2"}
}

// newMachineDeployment creates a YonderMetalMachineTemplate and a MachineDeployment of replicas from it.
func newMachineDeployment(g Gomega, ns, name string, cluster *clusterv1.Cluster, data string, replicas int32, sel map[string]string) *clusterv1.MachineDeployment {
	ctx := context.Background()
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{
			Spec: infrav1.YonderMetalMachineSpec{Image: testImage(), AutomatedCleaningMode: "metadata",
				HostSelector: infrav1.HostSelector{MatchLabels: sel}}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	return newMachineDeploymentFrom(g, ns, name, cluster, data, replicas, tmpl.Name)
}

// newMachineDeploymentFrom creates a MachineDeployment of replicas from an existing template.
func newMachineDeploymentFrom(g Gomega, ns, name string, cluster *clusterv1.Cluster, data string, replicas int32, tmpl string) *clusterv1.MachineDeployment {
	ctx := context.Background()
	labels := map[string]string{"md": name}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster.Name, Replicas: ptr.To(replicas),
			Selector: metav1.LabelSelector{MatchLabels: labels},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec: clusterv1.MachineSpec{
					ClusterName: cluster.Name, Version: "v1.36.3",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(data)},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderMetalMachineTemplate", Name: tmpl},
				},
			},
		},
	}
	g.Expect(env.Create(ctx, md)).To(Succeed())
	return md
}

func scale(g Gomega, md *clusterv1.MachineDeployment, n int32) {
	g.Eventually(func() error {
		cur := &clusterv1.MachineDeployment{}
		if err := env.Get(context.Background(), client.ObjectKeyFromObject(md), cur); err != nil {
			return err
		}
		cur.Spec.Replicas = ptr.To(n)
		return env.Update(context.Background(), cur)
	}).Should(Succeed())
}

// metalMachines lists the YonderMetalMachines of a namespace, uncached: invariants compare machines with
// hosts, and two informers of the test manager's cache may lag each other.
func metalMachines(g Gomega, ns string) []infrav1.YonderMetalMachine {
	l := &infrav1.YonderMetalMachineList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	return l.Items
}

// hostList lists the BareMetalHosts of a namespace, uncached.
func hostList(g Gomega, ns string) []metal3v1.BareMetalHost {
	l := &metal3v1.BareMetalHostList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	return l.Items
}

func host(g Gomega, ns, name string) *metal3v1.BareMetalHost {
	h := &metal3v1.BareMetalHost{}
	g.Expect(env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, h)).To(Succeed())
	return h
}

// checkClaims asserts the inventory invariants: no YonderMetalMachine holds more than one host and (unless
// allowDeleted) every claim by a YonderMetalMachine names a live one. It returns consumer UID → host.
func checkClaims(g Gomega, ns string, allowDeleted bool) map[string]string {
	live := map[string]bool{}
	for _, m := range metalMachines(g, ns) {
		live[string(m.UID)] = true
	}
	byConsumer := map[string]string{}
	for _, h := range hostList(g, ns) {
		ref := h.Spec.ConsumerRef
		if ref == nil || ref.Kind != "YonderMetalMachine" {
			continue
		}
		g.Expect(byConsumer).NotTo(HaveKey(string(ref.UID)), "machine %s claims hosts %s and %s", ref.Name, byConsumer[string(ref.UID)], h.Name)
		byConsumer[string(ref.UID)] = h.Name
		if !allowDeleted {
			g.Expect(live).To(HaveKey(string(ref.UID)), "host %s is claimed by %s, which no longer exists", h.Name, ref.Name)
		}
	}
	return byConsumer
}

// ensureNodes stands in for the kubelet: for every provisioned YonderMetalMachine it creates, in the
// workload cluster, the Node a joining kubelet would register with that providerID.
func ensureNodes(g Gomega, wlc client.Client, ns string) {
	for _, m := range metalMachines(g, ns) {
		if m.Spec.ProviderID == "" || !m.DeletionTimestamp.IsZero() {
			continue
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + m.Status.HostRef}, Spec: corev1.NodeSpec{ProviderID: m.Spec.ProviderID}}
		if err := wlc.Create(context.Background(), node); err != nil && !apierrors.IsAlreadyExists(err) {
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
}

func condition(m *infrav1.YonderMetalMachine, t string) *metav1.Condition {
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Type == t {
			return &m.Status.Conditions[i]
		}
	}
	return nil
}
