package describe

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"

	metalv1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1" //nolint:importas // the plugin reads both providers' kinds: infrav1 is the SSH provider's
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/site"
	"github.com/yonder-dev/yonder/test/controlplane"
)

func ref(kind, name string) clusterv1.ContractVersionedObjectReference {
	group := builder.InfrastructureGroupVersion.Group
	switch kind {
	case builder.GenericControlPlaneKind:
		group = builder.ControlPlaneGroupVersion.Group
	case builder.GenericBootstrapConfigKind:
		group = builder.BootstrapGroupVersion.Group
	}
	return clusterv1.ContractVersionedObjectReference{APIGroup: group, Kind: kind, Name: name}
}

func cond(t, status, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, Message: "", LastTransitionTime: metav1.Now()}
}

// describe cluster draws one tree out of a real management apiserver (Cluster, an SSH Machine with its
// YonderSSHHost, a metal Machine with its YonderMetalMachine and BareMetalHost) and a real workload
// apiserver (Nodes, Sites, a GatewayPool, a SitePeering, NodeNetworks, a PeerSlice), each line with its
// health, and -o yaml|json prints the same objects as a List that parses back.
func TestDescribeClusterDrawsTheTree(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cp, err := controlplane.Start(ctx, controlplane.Options{Name: "describe"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	wl, err := client.New(cp.Config, client.Options{Scheme: cli.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	mgmt := env.Client
	ns := env.CreateNamespace(ctx, t, "describe").Name

	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Spec: clusterv1.ClusterSpec{ControlPlaneRef: ref(builder.GenericControlPlaneKind, "edge-cp")}}
	g.Expect(mgmt.Create(ctx, cluster)).To(Succeed())
	cluster.Status.Phase = "Provisioned"
	cluster.Status.Conditions = []metav1.Condition{cond(clusterv1.AvailableCondition, "True", "Available"), cond("WorkersAvailable", "False", "NotEnoughReplicas")}
	g.Expect(mgmt.Status().Update(ctx, cluster)).To(Succeed())

	machine := func(name, kind string) {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: "edge"}},
			Spec: clusterv1.MachineSpec{ClusterName: "edge", Version: "v1.36.3", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr("data")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: kind, Name: name}}}
		g.Expect(mgmt.Create(ctx, m)).To(Succeed())
		m.Status.Phase = "Running"
		m.Status.NodeRef = clusterv1.MachineNodeReference{Name: name}
		m.Status.Conditions = []metav1.Condition{cond(clusterv1.ReadyCondition, "True", "Ready")}
		g.Expect(mgmt.Status().Update(ctx, m)).To(Succeed())
	}
	machine("edge-md-0-abc", "YonderSSHMachine")
	machine("edge-metal-0", "YonderMetalMachine")

	host := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site-a-0"}, Spec: infrav1.YonderSSHHostSpec{
		SSHEndpoint: infrav1.SSHEndpoint{Address: "10.250.9.10", CredentialsSecretRef: infrav1.SecretReference{Name: "s"}}, FailureDomain: "site-a",
		ConsumerRef: &infrav1.ConsumerReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "YonderSSHMachine", Name: "edge-md-0-abc", UID: "u", ClusterName: "edge"}}}
	other := host.DeepCopy()
	other.Name, other.Spec.ConsumerRef.ClusterName, other.Spec.ConsumerRef.Name = "other-0", "other", "other-md-0"
	g.Expect(mgmt.Create(ctx, host)).To(Succeed())
	g.Expect(mgmt.Create(ctx, other)).To(Succeed())

	mm := &metalv1.YonderMetalMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-metal-0"}}
	g.Expect(mgmt.Create(ctx, mm)).To(Succeed())
	bmh := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rack-1", Labels: map[string]string{metalv1.FailureDomainLabel: "site-b"}},
		Spec: metal3v1.BareMetalHostSpec{Online: true, BMC: metal3v1.BMCDetails{Address: "redfish://10.250.8.2/redfish/v1/Systems/1", CredentialsName: "rack-1-bmc"},
			ConsumerRef: &corev1.ObjectReference{APIVersion: metalv1.GroupVersion.String(), Kind: "YonderMetalMachine", Namespace: ns, Name: "edge-metal-0"}}}
	spare := bmh.DeepCopy()
	spare.Name, spare.Spec.ConsumerRef = "rack-2", nil
	g.Expect(mgmt.Create(ctx, bmh)).To(Succeed())
	g.Expect(mgmt.Create(ctx, spare)).To(Succeed())
	bmh.Status = metal3v1.BareMetalHostStatus{OperationalStatus: metal3v1.OperationalStatusOK, PoweredOn: true,
		Provisioning: metal3v1.ProvisionStatus{State: metal3v1.StateProvisioned}}
	g.Expect(mgmt.Status().Update(ctx, bmh)).To(Succeed())

	o := cli.NewOptions().WithConfig(env.Config, ns)
	out := &bytes.Buffer{}
	o.Out, o.ErrOut = out, &bytes.Buffer{}
	names := func() []string {
		v, err := Gather(ctx, mgmt, ns, "edge")
		g.Expect(err).NotTo(HaveOccurred())
		var col []string
		for _, r := range Tree(o, v).Rows() {
			col = append(col, r[0])
		}
		return col
	}

	// Without the kubeconfig Secret the management side still shows, by failure domain, and says why the rest is missing.
	g.Expect(names()).To(Equal([]string{
		"Cluster/edge",
		"├─ Condition/WorkersAvailable",
		"├─ Site/site-a",
		"│  └─ Machine/edge-md-0-abc",
		"│     └─ YonderSSHHost/site-a-0",
		"├─ Site/site-b",
		"│  └─ Machine/edge-metal-0",
		"│     └─ BareMetalHost/rack-1",
		"└─ Workload cluster",
	}))
	g.Expect(Cluster(ctx, o, "edge")).To(Succeed())
	g.Expect(out.String()).To(MatchRegexp(`Workload cluster\s+Unknown\s+unavailable: failed to read the kubeconfig Secret`))
	g.Expect(out.String()).NotTo(ContainSubstring("other-0"))
	g.Expect(out.String()).NotTo(ContainSubstring("rack-2"))

	// The workload side: Nodes (one joined by hand), and the network add-on's objects.
	g.Expect(cp.WriteKubeconfigSecret(ctx, mgmt, cluster)).To(Succeed())
	node := func(name, site, ip string, isReady corev1.ConditionStatus) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{netv1.SiteLabel: site}}}
		g.Expect(wl.Create(ctx, n)).To(Succeed())
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: isReady, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		g.Expect(wl.Status().Update(ctx, n)).To(Succeed())
	}
	node("edge-md-0-abc", "site-a", "10.250.9.10", corev1.ConditionTrue)
	node("edge-metal-0", "site-b", "10.250.8.10", corev1.ConditionTrue)
	node("manual-7", "site-a", "10.250.9.17", corev1.ConditionFalse)
	out.Reset()
	g.Expect(Cluster(ctx, o, "edge")).To(Succeed())
	g.Expect(out.String()).To(MatchRegexp(`│     └─ Node/edge-metal-0\s+True\s+10\.250\.8\.10`))
	g.Expect(out.String()).To(MatchRegexp(`└─ Network add-on\s+-\s+the network add-on is not installed \(kubectl yonder site init\)`))

	objs, err := site.Objects()
	g.Expect(err).NotTo(HaveOccurred())
	for _, u := range objs {
		if u.GetKind() == "CustomResourceDefinition" {
			g.Expect(wl.Create(ctx, u.DeepCopy())).To(Succeed())
		}
	}
	create := func(obj client.Object, setStatus func()) {
		g.Eventually(func() error { return wl.Create(ctx, obj) }).WithTimeout(30 * time.Second).Should(Succeed())
		if setStatus != nil {
			setStatus()
			g.Expect(wl.Status().Update(ctx, obj)).To(Succeed())
		}
	}
	siteA := &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "site-a"}}
	create(siteA, func() {
		siteA.Status = netv1.SiteStatus{Nodes: 2, ReadyNodes: 1, Gateways: 1, ActiveGateways: 1, Conditions: []metav1.Condition{cond("Ready", "True", "Ready")}}
	})
	siteB := &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "site-b"}}
	create(siteB, func() {
		siteB.Status = netv1.SiteStatus{Nodes: 1, ReadyNodes: 1, Conditions: []metav1.Condition{cond("Ready", "False", netv1.SiteNoActiveGatewayReason)}}
	})
	pool := &netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: "site-a-gw"}, Spec: netv1.GatewayPoolSpec{Site: "site-a",
		NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"gw": "true"}}}}
	create(pool, func() {
		pool.Status = netv1.GatewayPoolStatus{Candidates: 2, Active: 1, Conditions: []metav1.Condition{cond("Ready", "True", "Ready")},
			Gateways: []netv1.GatewayStatus{{Node: "edge-md-0-abc", Active: true}, {Node: "manual-7", Reason: netv1.GatewayNodeNotReady}}}
	})
	create(&netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "a-b"}, Spec: netv1.SitePeeringSpec{Sites: []string{"site-a", "site-b"}, Topology: netv1.TopologyGateway}}, nil)
	nnA := &netv1.NodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: "edge-md-0-abc"}, Spec: netv1.NodeNetworkSpec{PublicKey: "qLcIYOwyPnPDOMpFR2mLD3hYoD8bJL2V1ndm0YXg4Gg=",
		Endpoints: []netv1.Endpoint{{Address: "10.250.9.10", Type: netv1.EndpointInternal}}, Protocols: []netv1.Protocol{netv1.ProtocolWireGuard}}}
	create(nnA, func() { nnA.Status.Conditions = []metav1.Condition{cond("Ready", "True", "Programmed")} })
	nnB := &netv1.NodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: "edge-metal-0"}}
	create(nnB, func() { nnB.Status.Conditions = []metav1.Condition{cond("Ready", "False", "HandshakeFailed")} })
	create(&netv1.PeerSlice{ObjectMeta: metav1.ObjectMeta{Name: "site-a-gateways"}, Spec: netv1.PeerSliceSpec{Site: "site-a", Role: netv1.SliceRoleGateways,
		Peers: []netv1.Peer{{Node: "edge-md-0-abc", Gateway: &netv1.PeerGateway{Pools: []string{"site-a-gw"}, Active: true}}}}}, nil)

	g.Expect(names()).To(Equal([]string{
		"Cluster/edge",
		"├─ Condition/WorkersAvailable",
		"├─ Site/site-a",
		"│  ├─ GatewayPool/site-a-gw",
		"│  ├─ Machine/edge-md-0-abc",
		"│  │  ├─ YonderSSHHost/site-a-0",
		"│  │  └─ Node/edge-md-0-abc",
		"│  │     └─ NodeNetwork/edge-md-0-abc",
		"│  └─ Node/manual-7",
		"├─ Site/site-b",
		"│  └─ Machine/edge-metal-0",
		"│     ├─ BareMetalHost/rack-1",
		"│     └─ Node/edge-metal-0",
		"│        └─ NodeNetwork/edge-metal-0",
		"└─ SitePeering/a-b",
	}))
	out.Reset()
	g.Expect(Cluster(ctx, o, "edge")).To(Succeed())
	for _, line := range []string{
		`(?m)^NAME\s+READY\s+DETAILS$`,
		`(?m)^Cluster/edge\s+True\s+phase Provisioned, control plane -, age `,
		`├─ Condition/WorkersAvailable\s+False\s+NotEnoughReplicas`,
		`├─ Site/site-a\s+True\s+nodes 1/2 ready, gateways 1/1 active, pod CIDRs 0/0\n`,
		`│  ├─ GatewayPool/site-a-gw\s+True\s+1/2 active edge-md-0-abc\(active\) manual-7\(NodeNotReady\)`,
		`│  ├─ Machine/edge-md-0-abc\s+True\s+Running, v1\.36\.3\n`,
		`│  │  ├─ YonderSSHHost/site-a-0\s+-\s+10\.250\.9\.10, failure domain site-a`,
		`│  │     └─ NodeNetwork/edge-md-0-abc\s+True\s+WireGuard, 10\.250\.9\.10\(Internal\), key qLcIYOwy…, gateway \(active\)`,
		`│  └─ Node/manual-7\s+False\s+no Machine \(joined by hand\); 10\.250\.9\.17`,
		`├─ Site/site-b\s+False\s+nodes 1/1 ready, gateways 0/0 active, pod CIDRs 0/0; NoActiveGateway`,
		`│     ├─ BareMetalHost/rack-1\s+True\s+provisioned, powered on, BMC redfish://10\.250\.8\.2/redfish/v1/Systems/1`,
		`│        └─ NodeNetwork/edge-metal-0\s+False\s+HandshakeFailed\n`,
		`└─ SitePeering/a-b\s+-\s+site-a ↔ site-b, Gateway`,
	} {
		g.Expect(out.String()).To(MatchRegexp(line))
	}

	t.Log("\n" + out.String())

	// -o yaml and -o json: the same objects, as a List that parses back.
	kinds := []string{"Cluster", "Site", "Site", "GatewayPool", "SitePeering", "Machine", "Machine", "YonderSSHHost", "YonderMetalMachine",
		"BareMetalHost", "Node", "Node", "Node", "NodeNetwork", "NodeNetwork", "PeerSlice"}
	for _, format := range []string{cli.OutputYAML, cli.OutputJSON} {
		out.Reset()
		o.Output = format
		g.Expect(Cluster(ctx, o, "edge")).To(Succeed())
		data := out.Bytes()
		if format == cli.OutputYAML {
			data = mustJSON(t, data)
		} else {
			g.Expect(json.Valid(data)).To(BeTrue())
		}
		list := &unstructured.UnstructuredList{}
		g.Expect(list.UnmarshalJSON(data)).To(Succeed(), format)
		var got []string
		for _, it := range list.Items {
			got = append(got, it.GetKind())
			g.Expect(it.GetManagedFields()).To(BeEmpty())
		}
		g.Expect(got).To(Equal(kinds), format)
	}
	o.Output = "toml"
	g.Expect(Cluster(ctx, o, "edge")).To(MatchError(ContainSubstring(`unknown output format "toml"`)))
	o.Output = ""
	g.Expect(Cluster(ctx, o, "missing")).To(MatchError(ContainSubstring("does not exist")))
}

func ptr[T any](v T) *T { return &v }

func mustJSON(t *testing.T, y []byte) []byte {
	t.Helper()
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
