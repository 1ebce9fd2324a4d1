package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/test/flavorcheck"
	"github.com/yonder-dev/yonder/test/stack"
)

// The stack every scenario shares (starting one costs a minute; scenarios clean up their Clusters).
var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(stack.RunTests(m, stack.Options{
		// The spare hosts are registered by TestReleasedPlugin's `kubectl yonder host add` or joined by hand.
		// TestSeparateClusters/QuickstartAsWritten registers the quickstart site's hosts as docs/quickstart.md shows.
		Sites: []stack.Site{{Name: "east", Hosts: 5}, {Name: "spare", Hosts: 2, Unregistered: true},
			{Name: quickstartSite, Hosts: 2, Unregistered: true}},
		FastNodeMonitoring: true,
		// ClusterClass support is on, as the quick start documents (TestClusterClass uses it).
		ClusterTopology: true,
		// CAPI's kubeadm providers beside Yonder's, as a user composing them installs them
		// (TestSeparateClusters/KubeadmWorkersOnSSHHosts, the ssh-kubeadm flavor).
		KubeadmProviders: true,
		// The workload cluster runs kube-proxy on its Nodes, as a user's cluster does: TestMove's providers run
		// there as Pods and reach the API server through the kubernetes Service.
		KubeProxy: true,
	}, func(s *stack.Stack) { st = s }))
}

// generateCluster runs `clusterctl generate cluster` with a flavor and returns the objects, with only the
// variables a user sets (docs/clusterctl.md): the registry's CA Secret and mirrors, the Kubernetes version.
// Nothing is added to the templates: nodes get their software from the node image of their version.
func generateCluster(ctx context.Context, t *testing.T, name, flavor string, workers int) []*unstructured.Unstructured {
	t.Helper()
	return generateClusterVersion(ctx, t, name, flavor, workers, stack.KubernetesVersion)
}

func generateClusterVersion(ctx context.Context, t *testing.T, name, flavor string, workers int, version string) []*unstructured.Unstructured {
	t.Helper()
	return generateClusterIn(ctx, t, st.HostNamespace, name, flavor, workers, version)
}

// generateClusterIn is generateClusterVersion into namespace ns, which holds the Secrets
// stack.WorkloadKubeconfigSecret and stack.RegistryCASecret.
func generateClusterIn(ctx context.Context, t *testing.T, ns, name, flavor string, workers int, version string) []*unstructured.Unstructured {
	t.Helper()
	env := append([]string{"YONDER_CONTROL_PLANE_KUBECONFIG_SECRET=" + stack.WorkloadKubeconfigSecret,
		// MachineHealthCheck: a Node NotReady for 20s is remediated (the stack's node monitoring is fast).
		"YONDER_UNHEALTHY_TIMEOUT_SECONDS=20"}, st.TemplateEnv()...)
	out, err := st.Clusterctl(ctx, env,
		"generate", "cluster", name, "--infrastructure", "yonder-ssh:v0.1.0", "--flavor", flavor,
		"--kubernetes-version", version, "--target-namespace", ns,
		"--worker-machine-count", fmt.Sprint(workers))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := flavorcheck.Decode([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func apply(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if err := st.Client.Create(ctx, o); err != nil {
			t.Fatalf("failed to create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// readyNodes returns the workload cluster's Ready Nodes by name with their providerIDs.
func readyNodes(ctx context.Context) (map[string]string, error) {
	nodes := &corev1.NodeList{}
	if err := st.WorkloadClient.List(ctx, nodes); err != nil {
		return nil, err
	}
	ready := map[string]string{}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready[n.Name] = n.Spec.ProviderID
			}
		}
	}
	return ready, nil
}

// machines returns the Cluster's Machines.
func machines(ctx context.Context, cluster string) ([]clusterv1.Machine, error) {
	return machinesIn(ctx, st.HostNamespace, cluster)
}

// machinesIn returns the Machines of Cluster ns/cluster.
func machinesIn(ctx context.Context, ns, cluster string) ([]clusterv1.Machine, error) {
	ms := &clusterv1.MachineList{}
	if err := st.Client.List(ctx, ms, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
		return nil, err
	}
	return ms.Items, nil
}

// waitWorkers waits until the Cluster has n Machines, each with a Ready Node whose providerID is the
// Machine's (yonder-ssh://<namespace>/<host>).
func waitWorkers(ctx context.Context, t *testing.T, cluster string, n int, timeout time.Duration) []clusterv1.Machine {
	t.Helper()
	return waitWorkersIn(ctx, t, st.HostNamespace, cluster, n, timeout)
}

// waitWorkersIn is waitWorkers for Cluster ns/cluster (providerIDs yonder-ssh://<ns>/<host>).
func waitWorkersIn(ctx context.Context, t *testing.T, ns, cluster string, n int, timeout time.Duration) []clusterv1.Machine {
	t.Helper()
	var last string
	var got []clusterv1.Machine
	err := stack.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		ms, err := machinesIn(ctx, ns, cluster)
		if err != nil {
			return false, err
		}
		nodes, err := readyNodes(ctx)
		if err != nil {
			return false, nil
		}
		ok := 0
		var states []string
		for _, m := range ms {
			pid := m.Spec.ProviderID
			if m.DeletionTimestamp.IsZero() && m.Status.NodeRef.IsDefined() && pid != "" && nodes[m.Status.NodeRef.Name] == pid {
				ok++
			}
			states = append(states, fmt.Sprintf("%s phase=%s providerID=%q node=%q", m.Name, m.Status.Phase, pid, m.Status.NodeRef.Name))
		}
		last = fmt.Sprintf("%d machines (%s), ready nodes %v", len(ms), strings.Join(states, "; "), nodes)
		got = ms
		return ok == n && len(ms) == n, nil
	})
	if err != nil {
		t.Fatalf("Cluster %s did not reach %d Ready workers in %s: %s\nssh manager log:\n%s\nbootstrap manager log:\n%s", cluster, n, timeout, last,
			st.ManagerLog("infrastructure-yonder-ssh", 40), st.ManagerLog("bootstrap-yonder", 40))
	}
	return got
}

// deleteOnFailure deletes Cluster name (and waits for its hosts) when t fails with it still there, so a
// failed scenario does not leave its hosts claimed for the tests after it, which would fail too and hide
// which one broke.
func deleteOnFailure(t *testing.T, name string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		if !t.Failed() || st.Client.Get(ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: name}, &clusterv1.Cluster{}) != nil {
			return
		}
		t.Logf("deleting Cluster %s, left by the failure", name)
		deleteCluster(ctx, t, name)
	})
}

// scenario is one named scenario of a test that runs several (TestScenarios, TestSeparateClusters).
type scenario struct {
	name string
	f    func(*testing.T)
}

// TestScenarios runs the lifecycle scenarios in order on one stack; each reports its wall time.
func TestScenarios(t *testing.T) {
	deleteOnFailure(t, quickCluster)
	for _, sc := range []scenario{
		{"1-quickstart", testQuickStart},
		{"2-scale", testScale},
		{"4-remediation", testRemediation},
		{"7-chaos", testChaos},
		{"3-rollout", testRollout},
	} {
		t0 := time.Now()
		ok := t.Run(sc.name, sc.f)
		t.Logf("scenario %s: %s in %s", sc.name, map[bool]string{true: "passed", false: "FAILED"}[ok], time.Since(t0).Round(time.Second))
		if !ok {
			// Later scenarios build on the Cluster the earlier ones left.
			t.FailNow()
		}
	}
}

// TestSeparateClusters runs at once the scenarios that share nothing but the management stack's managers:
// each brings its own hosts and its own workload cluster (kubeadm's on full-OS hosts, or a management
// cluster of its own on the quickstart site's hosts) in a namespace of its own, so none of them can see
// another's Machines, hosts or Nodes. go test runs two at a time (-parallel defaults to the cores); the
// longest two start first. Fresh-clone CI of 6 Dec: 403 s together against 518 s one after another — the
// machine was busy either way, so the other lane gave back some of that. Before TestMove and
// TestClusterctlUpgrade, which change what every scenario runs against.
func TestSeparateClusters(t *testing.T) {
	for _, sc := range []scenario{
		{"KubeadmClusterOnSSHHosts", testKubeadmClusterOnSSHHosts},
		{"QuickstartAsWritten", testQuickstartAsWritten},
		{"KubeadmWorkersOnSSHHosts", testKubeadmWorkersOnSSHHosts},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Now()
			sc.f(t)
			t.Logf("scenario %s: %s in %s", sc.name, map[bool]string{true: "FAILED", false: "passed"}[t.Failed()], time.Since(t0).Round(time.Second))
		})
	}
}

func testQuickStart(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	t0 := time.Now()
	objs := generateCluster(ctx, t, "quick", "ssh", 1)
	apply(ctx, t, objs)
	ms := waitWorkers(ctx, t, "quick", 1, 8*time.Minute)
	g.Expect(ms[0].Spec.ProviderID).To(HavePrefix("yonder-ssh://" + st.HostNamespace + "/"))
	t.Logf("scenario 1 (quick start, 1 worker joined) took %s", time.Since(t0).Round(time.Second))

	// clusterctl describe shows our objects with their conditions.
	out, err := st.Clusterctl(ctx, nil, "describe", "cluster", "quick", "-n", st.HostNamespace, "--show-conditions", "all")
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("clusterctl describe cluster quick:\n%s", out)
	for _, want := range []string{
		"YonderControlPlane default/quick", "KubeconfigValid", "JoinRBACReady", "ControlPlaneAvailable",
		"YonderSSHCluster default/quick", "FailureDomainsComputed", "MachineDeployment default/quick-md-0",
		"Machine default/" + ms[0].Name, "NodeReady",
	} {
		g.Expect(out).To(ContainSubstring(want))
	}
}
