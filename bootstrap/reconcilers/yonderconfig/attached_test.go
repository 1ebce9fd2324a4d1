package yonderconfig_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
)

// Both Yonder providers together: a YonderControlPlane attaches the existing cluster, CAPI connects to it
// through the "<cluster>-kubeconfig" the adapter wrote, and a Machine's YonderConfig gets a token in that
// cluster, its endpoint, its CA and its version (the adapter's status.version).
func TestYonderConfigOnAnAttachedCluster(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "attached").Name
	g.Expect(env.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-external-kubeconfig"},
		Data:       map[string][]byte{"value": workload.AdminKubeconfig},
	})).To(Succeed())
	g.Expect(env.Create(ctx, &controlplanev1.YonderControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge", Labels: filterLabels}})).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge", Labels: filterLabels},
		Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: controlplanev1.GroupVersion.Group, Kind: "YonderControlPlane", Name: "edge",
		}},
	}
	g.Expect(env.Create(ctx, cluster)).To(Succeed())

	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(builder.InfrastructureGroupVersion.String())
	infra.SetKind(builder.GenericInfrastructureMachineKind)
	infra.SetNamespace(ns)
	infra.SetName("w0")
	_ = unstructured.SetNestedMap(infra.Object, map[string]any{}, "spec")
	g.Expect(env.Create(ctx, infra)).To(Succeed())
	g.Expect(env.Create(ctx, &bootstrapv1.YonderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w0", Labels: filterLabels}})).To(Succeed())
	g.Expect(env.Create(ctx, &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w0", Labels: filterLabels},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "YonderConfig", Name: "w0",
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: builder.InfrastructureGroupVersion.Group, Kind: builder.GenericInfrastructureMachineKind, Name: "w0",
			},
		},
	})).To(Succeed())

	g.Eventually(func(g Gomega) {
		m := &clusterv1.Machine{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w0"}, m)).To(Succeed())
		g.Expect(m.Spec.Bootstrap.DataSecretName).To(HaveValue(Equal("w0")))
	}).Should(Succeed())
	s := dataSecret(ctx, g, ns, "w0")
	ac := agentConfigOf(g, s)
	g.Expect(ac.APIServer.Endpoint).To(Equal(workload.Endpoint))
	g.Expect(ac.APIServer.CACertificate).To(Equal(string(workload.CACertPEM)))
	g.Expect(ac.KubernetesVersion).To(HavePrefix("v1.36."))
	cp := &controlplanev1.YonderControlPlane{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, cp)).To(Succeed())
	g.Expect(ac.KubernetesVersion).To(Equal(cp.Status.Version))
	id := strings.Split(ac.BootstrapToken, ".")[0]
	_, err := workloadClient(g).CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}
