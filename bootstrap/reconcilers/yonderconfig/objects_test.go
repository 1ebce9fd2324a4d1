package yonderconfig_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/bootstrap/internal/cloudinit"
	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/harness"
)

// controlPlaneVersion is what the control plane reports; Machines made by newMachine set no version, so
// their kubelet version defaults to it.
const controlPlaneVersion = "v1.36.2"

var filterLabels = map[string]string{clusterv1.WatchLabel: watchFilter}

// newCluster creates a Cluster, in a namespace of its own, attached to the workload apiserver (see
// harness.AttachedCluster) whose control plane reports controlPlaneVersion.
func newCluster(ctx context.Context, t *testing.T, g *WithT, prefix string) *clusterv1.Cluster {
	t.Helper()
	ns := env.CreateNamespace(ctx, t, prefix)
	return harness.AttachedCluster(t, g, env, workload, harness.ClusterOptions{Namespace: ns.Name, Name: "wl", Labels: filterLabels,
		ControlPlaneVersion: controlPlaneVersion})
}

// newMachine creates a YonderConfig, a generic infrastructure machine (provisioned, with a providerID
// and addresses, as an infrastructure provider reports them) and the Machine that ties them together.
func newMachine(ctx context.Context, g *WithT, cluster *clusterv1.Cluster, name string, spec bootstrapv1.YonderConfigSpec, addresses []clusterv1.MachineAddress) *clusterv1.Machine {
	return newMachineWithLabels(ctx, g, cluster, name, spec, addresses, filterLabels)
}

func newMachineWithLabels(ctx context.Context, g *WithT, cluster *clusterv1.Cluster, name string, spec bootstrapv1.YonderConfigSpec, addresses []clusterv1.MachineAddress, labels map[string]string) *clusterv1.Machine {
	cfg := &bootstrapv1.YonderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name, Labels: labels}, Spec: spec}
	g.Expect(env.Create(ctx, cfg)).To(Succeed())

	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(builder.InfrastructureGroupVersion.String())
	infra.SetKind(builder.GenericInfrastructureMachineKind)
	infra.SetNamespace(cluster.Namespace)
	infra.SetName(name)
	_ = unstructured.SetNestedField(infra.Object, "yonder-test://"+cluster.Namespace+"/"+name, "spec", "providerID")
	g.Expect(env.Create(ctx, infra)).To(Succeed())
	addrs := []any{}
	for _, a := range addresses {
		addrs = append(addrs, map[string]any{"type": string(a.Type), "address": a.Address})
	}
	_ = unstructured.SetNestedField(infra.Object, true, "status", "initialization", "provisioned")
	_ = unstructured.SetNestedSlice(infra.Object, addrs, "status", "addresses")
	g.Expect(env.Status().Update(ctx, infra)).To(Succeed())

	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "YonderConfig", Name: name,
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: builder.InfrastructureGroupVersion.Group, Kind: builder.GenericInfrastructureMachineKind, Name: name,
			},
		},
	}
	g.Expect(env.Create(ctx, m)).To(Succeed())
	return m
}

// dataSecret waits for a YonderConfig's data Secret and returns it.
func dataSecret(ctx context.Context, g *WithT, ns, name string) *corev1.Secret {
	s := &corev1.Secret{}
	g.Eventually(func() error {
		return env.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)
	}).Should(Succeed())
	return s
}

// agentConfigOf decodes the AgentConfig inside a data Secret.
func agentConfigOf(g Gomega, s *corev1.Secret) *agentv1.AgentConfig {
	c, err := cloudinit.Parse(s.Data["value"])
	g.Expect(err).NotTo(HaveOccurred())
	ac, err := c.AgentConfig()
	g.Expect(err).NotTo(HaveOccurred())
	return ac
}

func getConfig(ctx context.Context, g Gomega, ns, name string) *bootstrapv1.YonderConfig {
	c := &bootstrapv1.YonderConfig{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c)).To(Succeed())
	return c
}
