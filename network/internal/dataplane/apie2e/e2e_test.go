package apie2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/apisync"
	"github.com/yonder-dev/yonder/network/internal/dataplane/daemon"
	"github.com/yonder-dev/yonder/network/internal/dataplane/sitetest"
	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/network/setup"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	code := envtest.Run(m, testenv.Options(), func(e *envtest.Environment) { env = e })
	sitetest.RemoveBinary()
	os.Exit(code)
}

const (
	siteLabel = "e2e.node-restriction.kubernetes.io/site"
	gwLabel   = "e2e.node-restriction.kubernetes.io/gateway"
)

// TestControllerAndDaemons: Sites, GatewayPools and a SitePeering are created; the controller allocates pod
// CIDRs and publishes the route plan; each daemon publishes its NodeNetwork (public key, reachability) and
// programs the plan it reads from the API; pods of the two Sites then reach each other through the elected
// gateways, also across a key rotation.
func TestControllerAndDaemons(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme, err := setup.Scheme()
	g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = testenv.Cleanup(ctx, c) })
	testenv.Start(t, env, setup.Options{SliceSize: 100, NodeConcurrency: 2})
	createNetwork(ctx, g, c)
	s := sitetest.Build(t, createNodes(ctx, g, c))
	startSyncers(ctx, t, g, c, scheme, s)

	// Published keys reach the controller's slices, the gateways become active, and pods talk across Sites.
	a1, b2 := s.Nodes["a1"], s.Nodes["b2"]
	udpEcho(t, g, b2.Pod)
	diag := func() string { return diagnose(ctx, c, s) }
	to := net.JoinHostPort(b2.PodIP.String(), "7000")
	g.Eventually(func() error { return udpExchange(a1.Pod, to, "hello") }, 90*time.Second, 200*time.Millisecond).Should(Succeed(), diag)

	// The gateways' reachability checks (each other's WAN legs) went through the API: published by the
	// daemons, planned by the controller as a Direct link.
	for _, name := range []string{"ga1", "ga2", "gb1"} {
		g.Eventually(func() (*netv1.NodeReachability, error) {
			nn := &netv1.NodeNetwork{}
			err := c.Get(ctx, client.ObjectKey{Name: name}, nn)
			return nn.Spec.Reachability, err
		}, 60*time.Second, 200*time.Millisecond).Should(Equal(&netv1.NodeReachability{Inbound: netv1.ReachabilityReachable, ObservedAddress: s.Nodes[name].WAN.String()}), diag)
	}
	g.Eventually(func() ([]netv1.LinkStatus, error) {
		sp := &netv1.SitePeering{}
		err := c.Get(ctx, client.ObjectKey{Name: "e2e-ab"}, sp)
		return sp.Status.Links, err
	}, 30*time.Second, 200*time.Millisecond).Should(ConsistOf(And(HaveField("Kind", netv1.LinkKindDirect), HaveField("Up", true))))

	rotateThroughTheAPI(ctx, t, g, c, s, diag)
	g.Eventually(func() error { return udpExchange(a1.Pod, to, "after rotation") }, 10*time.Second, 200*time.Millisecond).Should(Succeed(), diag)
	expectPublished(ctx, g, c, s)
}

// createNetwork creates Sites e2ea and e2eb with pools, a GatewayPool each and a Gateway peering.
func createNetwork(ctx context.Context, g Gomega, c client.Client) {
	for site, pool := range map[string]string{"a": "10.10.0.0/16", "b": "10.20.0.0/16"} {
		g.Expect(c.Create(ctx, &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "e2e" + site},
			Spec: netv1.SiteSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{siteLabel: site}},
				PodCIDRPools: []netv1.PodCIDRPool{{CIDR: pool, BlockSize: 24}}}})).To(Succeed())
		g.Expect(c.Create(ctx, &netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e" + site + "-gw"},
			Spec: netv1.GatewayPoolSpec{Site: "e2e" + site, NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{gwLabel: "true"}}}})).To(Succeed())
	}
	g.Expect(c.Create(ctx, &netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "e2e-ab"},
		Spec: netv1.SitePeeringSpec{Sites: []string{"e2ea", "e2eb"}, Topology: netv1.TopologyGateway}})).To(Succeed())
}

// createNodes creates the lab's Nodes and returns the pod CIDRs the controller allocated them (the lab is
// built with them).
func createNodes(ctx context.Context, g Gomega, c client.Client) map[string]string {
	nodes := map[string]struct {
		site, lan string
		gw        bool
	}{
		"a1": {"a", "192.168.10.11", false}, "ga1": {"a", "192.168.10.21", true}, "ga2": {"a", "192.168.10.22", true},
		"gb1": {"b", "192.168.20.31", true}, "b2": {"b", "192.168.20.32", false},
	}
	for name, n := range nodes {
		labels := map[string]string{siteLabel: n.site}
		if n.gw {
			labels[gwLabel] = "true"
		}
		_, err := testenv.CreateNode(ctx, c, name, labels, n.lan, true)
		g.Expect(err).NotTo(HaveOccurred())
	}
	podCIDRs := map[string]string{}
	g.Eventually(func() (int, error) {
		for name := range nodes {
			n := &corev1.Node{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
				return 0, err
			}
			if n.Spec.PodCIDR != "" {
				podCIDRs[name] = n.Spec.PodCIDR
			}
		}
		return len(podCIDRs), nil
	}, 60*time.Second, 100*time.Millisecond).Should(Equal(len(nodes)))
	return podCIDRs
}

// startSyncers runs each daemon's API side: its own informers, as in a cluster.
func startSyncers(ctx context.Context, t *testing.T, g Gomega, c client.Client, scheme *runtime.Scheme, s *sitetest.Sites) {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	for _, n := range s.Nodes {
		ca, err := apisync.NewCache(env.Config, scheme, n.Name)
		g.Expect(err).NotTo(HaveOccurred())
		go func() { _ = ca.Start(sctx) }()
		sy := &apisync.Syncer{Client: c, Cache: ca, Node: n.Name, InputFile: n.InputFile(), Interval: time.Hour, Log: slog.Default(),
			Spec: n.Publication,
			State: func() apisync.DaemonState {
				st, err := s.Debug(n)
				ok := err == nil && st.Applied > 0 && st.LastError == ""
				return apisync.DaemonState{Applied: ok, Gateway: ok, Dataplane: daemon.DataplaneOf(st)}
			}}
		go func() { _ = sy.Run(sctx) }()
	}
}

// udpEcho echoes UDP datagrams on port 7000 in namespace ns until the test ends.
func udpEcho(t *testing.T, g Gomega, ns string) {
	t.Helper()
	pc, err := sitetest.Listen(ns, "udp4", ":7000")
	g.Expect(err).NotTo(HaveOccurred())
	echo := pc.(net.PacketConn)
	t.Cleanup(func() { _ = echo.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = echo.WriteTo(buf[:n], from)
		}
	}()
}

// udpExchange sends msg from namespace ns to addr and waits briefly for the echo.
func udpExchange(ns, addr, msg string) error {
	conn, err := sitetest.Dial(ns, "udp4", addr, time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.Write([]byte(msg)); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = conn.Read(make([]byte, 64))
	return err
}

func diagnose(ctx context.Context, c client.Client, s *sitetest.Sites) string {
	out := ""
	l := &netv1.RoutePlanList{}
	_ = c.List(ctx, l)
	for _, p := range l.Items {
		out += fmt.Sprintf("plan %s: %+v\n", p.Name, p.Spec.Links)
	}
	for _, n := range s.Nodes {
		st, err := s.Debug(n)
		out += fmt.Sprintf("%s: routes %+v down %v err %v %s\n", n.Name, st.Routes, st.Down, err, st.LastError)
	}
	return out
}

// rotateThroughTheAPI rotates gb1's key: gb1 publishes nextPublicKey, the controller copies it into gb1's
// PeerSlice, site a's gateways handshake with the new slot, gb1 switches and publishes the new key, the
// controller copies that too.
func rotateThroughTheAPI(ctx context.Context, t *testing.T, g Gomega, c client.Client, s *sitetest.Sites, diag func() string) {
	t.Helper()
	gb1 := s.Nodes["gb1"]
	oldKey := gb1.PubKey
	_, err := s.Lab.Exec(gb1.NS, sitetest.Binary(t), "rotate")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		nn := &netv1.NodeNetwork{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "gb1"}, nn)).To(Succeed())
		g.Expect(nn.Spec.WireGuardSlot).To(Equal(int32(1)))
		g.Expect(nn.Spec.NextPublicKey).To(BeEmpty())
		g.Expect(nn.Spec.PublicKey).NotTo(Equal(oldKey))
		gb1.PubKey = nn.Spec.PublicKey
		sl := &netv1.PeerSliceList{}
		g.Expect(c.List(ctx, sl)).To(Succeed())
		found := false
		for _, it := range sl.Items {
			for _, p := range it.Spec.Peers {
				if p.Node == "gb1" {
					found = true
					g.Expect(p.PublicKey).To(Equal(nn.Spec.PublicKey))
					g.Expect(p.WireGuardSlot).To(Equal(int32(1)))
				}
			}
		}
		g.Expect(found).To(BeTrue())
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed(), diag)
}

// expectPublished checks every NodeNetwork: the key the daemon publishes, and what it detected.
func expectPublished(ctx context.Context, g Gomega, c client.Client, s *sitetest.Sites) {
	for _, n := range s.Nodes {
		nn := &netv1.NodeNetwork{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: n.Name}, nn)).To(Succeed())
		g.Expect(nn.Spec.PublicKey).To(Equal(n.PubKey))
		g.Eventually(func() *netv1.NodeDataplaneStatus {
			_ = c.Get(ctx, client.ObjectKey{Name: n.Name}, nn)
			return nn.Status.Dataplane
		}, 10*time.Second, 100*time.Millisecond).Should(And(Not(BeNil()),
			HaveField("WireGuard", BeElementOf(netv1.WireGuardKernel, netv1.WireGuardUserspace)),
			HaveField("EBPFAttachMode", BeElementOf(netv1.EBPFAttachTCX, netv1.EBPFAttachClsact)),
			HaveField("KernelTunnelTypes", ContainElement(netv1.ProtocolVXLAN))))
	}
}
