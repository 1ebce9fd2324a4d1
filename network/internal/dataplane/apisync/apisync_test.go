package apisync

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, testenv.Options(), func(e *envtest.Environment) { env = e }))
}

func TestPublishAndReadPlan(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	// A direct client: the manager's cached one could read back stale objects.
	c, err := client.New(env.Config, client.Options{Scheme: env.GetScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dp-n1", Labels: map[string]string{netv1.SiteLabel: "dps1"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.61.1.0/24", PodCIDRs: []string{"10.61.1.0/24"}}}
	g.Expect(c.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, node) })

	spec := netv1.NodeNetworkSpec{PublicKey: "Hx8bR6PTb9C0eXjMmf0v5eP4Bv0hy5RD3zqoPr0hn0s=", UnderlayMTU: 1500,
		Ports:     netv1.Ports{WireGuard: 51820, Probe: 51822},
		Protocols: []netv1.Protocol{netv1.ProtocolWireGuard, netv1.ProtocolVXLAN},
		Endpoints: []netv1.Endpoint{{Address: "192.0.2.10", Type: netv1.EndpointInternal}}}
	input := filepath.Join(t.TempDir(), "plan.yaml")
	s := &Syncer{Client: c, Node: node.Name, InputFile: input, Log: slog.Default(), Interval: time.Second,
		Spec:  func() (netv1.NodeNetworkSpec, error) { return spec, nil },
		State: func() DaemonState { return DaemonState{Applied: true} }}

	// No plan yet: the NodeNetwork is published (the controller needs the key before it can plan).
	g.Expect(s.SyncOnce(ctx)).To(Succeed())
	nn := &netv1.NodeNetwork{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: node.Name}, nn)).To(Succeed())
	g.Expect(nn.Spec).To(Equal(spec))
	g.Expect(nn.OwnerReferences).To(HaveLen(1))
	g.Expect(input).NotTo(BeAnExistingFile())

	plan := &netv1.RoutePlan{ObjectMeta: metav1.ObjectMeta{Name: "dps1", Labels: map[string]string{netv1.SiteLabel: "dps1"}},
		Spec: netv1.RoutePlanSpec{Site: "dps1", IntraSite: netv1.IntraSitePlan{Protocol: netv1.ProtocolVXLAN, TunnelMTU: 1430},
			Links: []netv1.SiteLink{{Site: "dps2", Protocol: netv1.ProtocolWireGuard, Mode: netv1.LinkModeGateway, TunnelMTU: 1420,
				EndpointType: netv1.EndpointExternal, Prefixes: []string{"10.62.0.0/16"}, RemoteGateways: []string{"dp-g2"}, SelfGateway: true, Up: true}},
			HealthProbe: netv1.HealthProbeSpec{IntervalMilliseconds: 200, FailureThreshold: 3, Port: 51822}}}
	g.Expect(c.Create(ctx, plan)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, plan) })
	mk := func(name, site, role string, r netv1.SliceRole, peer string) {
		ps := &netv1.PeerSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{netv1.SiteLabel: site, netv1.SliceRoleLabel: role}},
			Spec: netv1.PeerSliceSpec{Site: site, Role: r, Peers: []netv1.Peer{{Node: peer, PodCIDRs: []string{"10.62.9.0/24"}}}}}
		g.Expect(c.Create(ctx, ps)).To(Succeed())
		t.Cleanup(func() { _ = c.Delete(ctx, ps) })
	}
	mk("dps1-nodes-0", "dps1", "nodes", netv1.SliceRoleNodes, "dp-n1")
	mk("dps2-gateways-0", "dps2", "gateways", netv1.SliceRoleGateways, "dp-g2")
	mk("dps2-nodes-0", "dps2", "nodes", netv1.SliceRoleNodes, "dp-n2")

	g.Expect(s.SyncOnce(ctx)).To(Succeed())
	b, err := os.ReadFile(input)
	g.Expect(err).NotTo(HaveOccurred())
	var in desired.Input
	g.Expect(yaml.Unmarshal(b, &in)).To(Succeed())
	g.Expect(in.Site).To(Equal("dps1"))
	g.Expect(in.PodCIDRs).To(Equal([]string{"10.61.1.0/24"}))
	g.Expect(in.Plan).To(Equal(plan.Spec))
	var names []string
	for _, sl := range in.Slices {
		names = append(names, sl.Site+"/"+string(sl.Role))
	}
	g.Expect(names).To(ConsistOf("dps1/Nodes", "dps2/Gateways"), "a gateway link reads only the remote gateways")

	g.Expect(c.Get(ctx, client.ObjectKey{Name: node.Name}, nn)).To(Succeed())
	g.Expect(meta.IsStatusConditionTrue(nn.Status.Conditions, netv1.ReadyCondition)).To(BeTrue())
	g.Expect(nn.Status.ObservedPlanGeneration).To(Equal(plan.Generation))

	// Nothing changed: nothing written.
	w := s.Writes
	g.Expect(s.SyncOnce(ctx)).To(Succeed())
	g.Expect(s.Writes).To(Equal(w))

	// A new key (rotation) is one spec update, and the status follows the new generation.
	spec.PublicKey = "mJ7f3x0vFJx7y1b2K4n7V2m3Zz0m7m2bQ0e3hQ9ZpGk="
	g.Expect(s.SyncOnce(ctx)).To(Succeed())
	g.Expect(s.Writes).To(Equal(w + 2))
	g.Expect(c.Get(ctx, client.ObjectKey{Name: node.Name}, nn)).To(Succeed())
	g.Expect(nn.Spec.PublicKey).To(Equal(spec.PublicKey))
	g.Expect(s.SyncOnce(ctx)).To(Succeed())
	g.Expect(s.Writes).To(Equal(w + 2))
}

// startWatchingSyncer creates Nodes dw-n1 (its own, Site dws1) and dw-n2, and runs a Syncer for dw-n1 with
// its informers and an hour's resync, so only watch events and local state changes drive it. Closing the
// returned channel makes the daemon report its plan applied.
func startWatchingSyncer(ctx context.Context, t *testing.T, g Gomega, c client.Client) (*corev1.Node, cache.Cache, string, chan struct{}) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dw-n1", Labels: map[string]string{netv1.SiteLabel: "dws1"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.71.1.0/24", PodCIDRs: []string{"10.71.1.0/24"}}}
	g.Expect(c.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dw-n2", Labels: map[string]string{netv1.SiteLabel: "dws1"}}}
	g.Expect(c.Create(ctx, other)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), other) })

	ca, err := NewCache(env.Config, env.GetScheme(), node.Name)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = ca.Start(ctx) }()
	applied := make(chan struct{})
	spec := netv1.NodeNetworkSpec{PublicKey: "Hx8bR6PTb9C0eXjMmf0v5eP4Bv0hy5RD3zqoPr0hn0s=", UnderlayMTU: 1500}
	input := filepath.Join(t.TempDir(), "plan.yaml")
	s := &Syncer{Client: c, Cache: ca, Node: node.Name, InputFile: input, Log: slog.Default(), Interval: time.Hour,
		StateInterval: 50 * time.Millisecond,
		Spec:          func() (netv1.NodeNetworkSpec, error) { return spec, nil },
		State: func() DaemonState {
			select {
			case <-applied:
				return DaemonState{Applied: true}
			default:
				return DaemonState{Message: "not yet"}
			}
		}}
	go func() { _ = s.Run(ctx) }()
	return node, ca, input, applied
}

// watchTimeout bounds TestWatchesDriveSyncs' waits for a watch event to reach the input file or the status.
const watchTimeout = 30 * time.Second

// TestWatchesDriveSyncs: with a Cache and a resync interval of an hour, the node's view still follows the API
// within a watch event: a new PeerSlice reaches the input file and an applied plan reaches the status.
func TestWatchesDriveSyncs(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := client.New(env.Config, client.Options{Scheme: env.GetScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	node, ca, input, applied := startWatchingSyncer(ctx, t, g, c)

	nn := &netv1.NodeNetwork{}
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Name: node.Name}, nn) }, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	// The node's cache holds only its own Node.
	nodes := &corev1.NodeList{}
	g.Expect(ca.List(ctx, nodes)).To(Succeed())
	g.Expect(nodes.Items).To(HaveLen(1))

	plan := &netv1.RoutePlan{ObjectMeta: metav1.ObjectMeta{Name: "dws1"},
		Spec: netv1.RoutePlanSpec{Site: "dws1", IntraSite: netv1.IntraSitePlan{Protocol: netv1.ProtocolVXLAN, TunnelMTU: 1430},
			HealthProbe: netv1.HealthProbeSpec{IntervalMilliseconds: 200, FailureThreshold: 3, Port: 51822}}}
	g.Expect(c.Create(ctx, plan)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), plan) })
	readPeers := func() ([]string, error) {
		b, err := os.ReadFile(input)
		if err != nil {
			return nil, err
		}
		var in desired.Input
		if err := yaml.Unmarshal(b, &in); err != nil {
			return nil, err
		}
		var out []string
		for _, sl := range in.Slices {
			for _, p := range sl.Peers {
				out = append(out, p.Node)
			}
		}
		return out, nil
	}
	// The resync interval is an hour, so any wait well below it proves a watch drove the sync: the waits
	// leave a loaded CI machine's apiserver and informers time (5 s did not always).
	g.Eventually(readPeers, watchTimeout, 50*time.Millisecond).Should(BeEmpty())
	ps := &netv1.PeerSlice{ObjectMeta: metav1.ObjectMeta{Name: "dws1-nodes-0", Labels: map[string]string{netv1.SiteLabel: "dws1", netv1.SliceRoleLabel: "nodes"}},
		Spec: netv1.PeerSliceSpec{Site: "dws1", Role: netv1.SliceRoleNodes, Peers: []netv1.Peer{{Node: "dw-n2", PodCIDRs: []string{"10.71.2.0/24"}}}}}
	start := time.Now()
	g.Expect(c.Create(ctx, ps)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), ps) })
	g.Eventually(readPeers, watchTimeout, 20*time.Millisecond).Should(ConsistOf("dw-n2"))
	t.Logf("PeerSlice to input file: %v", time.Since(start))

	// Not applied yet: Ready is False; once the daemon reports the plan applied, the status follows without
	// an API event.
	g.Eventually(func() bool {
		_ = c.Get(ctx, client.ObjectKey{Name: node.Name}, nn)
		return meta.IsStatusConditionFalse(nn.Status.Conditions, netv1.ReadyCondition)
	}, watchTimeout, 50*time.Millisecond).Should(BeTrue())
	close(applied)
	g.Eventually(func() bool {
		_ = c.Get(ctx, client.ObjectKey{Name: node.Name}, nn)
		return meta.IsStatusConditionTrue(nn.Status.Conditions, netv1.ReadyCondition)
	}, watchTimeout, 50*time.Millisecond).Should(BeTrue())
}
