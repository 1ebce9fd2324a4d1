// Package flavorcheck checks that what `clusterctl generate cluster` renders from a flavor is accepted by a
// real management cluster — the apiserver's schemas, CAPI's webhooks and Yonder's — and, for ClusterClass
// flavors, that CAPI's topology controller renders every MachineDeployment class through the class's
// patches. The e2e suites (test/e2e, test/e2e/metal) run it on their stacks, each for the flavors of the
// providers its stack installs.
package flavorcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/test/stack"
)

// Decode splits clusterctl's multi-document output into objects.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := d.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("failed to decode clusterctl output: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// Kinds counts the objects by kind.
func Kinds(objs []*unstructured.Unstructured) map[string]int {
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	return kinds
}

// Served reports whether the management cluster serves the kind of list (its provider is installed).
func Served(ctx context.Context, c client.Client, list client.ObjectList) (bool, error) {
	err := c.List(ctx, list, client.Limit(1))
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("failed to list %T: %w", list, err)
	}
	return true, nil
}

// Namespace creates a namespace of its own for a flavor's objects, deleted when the test ends.
func Namespace(ctx context.Context, t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("failed to create a namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	return ns.Name
}

// DryRun creates every object in namespace ns with a server-side dry run (schemas, defaulting and every
// admission webhook run; nothing is stored) and fails the test on the first refusal.
func DryRun(ctx context.Context, t testing.TB, c client.Client, ns string, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		o = o.DeepCopy()
		o.SetNamespace(ns)
		if err := c.Create(ctx, o, client.DryRunAll); err != nil {
			t.Fatalf("the apiserver refused %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// MachineDeploymentCheck checks one MachineDeployment the topology controller created: its topology
// name (topology.workers.machineDeployments[].name) and its bootstrap and infrastructure templates.
type MachineDeploymentCheck func(g gomega.Gomega, name string, bootstrap, infrastructure *unstructured.Unstructured)

// Topology creates a ClusterClass flavor's objects for real (a dry run would not run the class's patches)
// in namespace ns, with every worker MachineDeployment at 0 replicas so no host is claimed. First a copy of
// the Cluster whose variable badVariable holds an object instead of its schema's type must be refused by
// CAPI's topology webhook. Then the Cluster is created; its YonderControlPlane attaches the stack's workload
// cluster (CAPI creates MachineDeployments only once the control plane is initialized), so the stack's
// workload kubeconfig Secret is copied into ns. check runs for every MachineDeployment the topology
// controller creates. The Cluster is deleted (and waited for) when the test ends.
func Topology(ctx context.Context, t testing.TB, s *stack.Stack, ns, badVariable string, objs []*unstructured.Unstructured, check MachineDeploymentCheck) {
	t.Helper()
	g := gomega.NewWithT(t)
	c := s.Client
	src := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: s.HostNamespace, Name: stack.WorkloadKubeconfigSecret}, src)).To(gomega.Succeed())
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: src.Name}, Data: src.Data})).To(gomega.Succeed())
	var cluster *unstructured.Unstructured
	for _, o := range objs {
		o = o.DeepCopy()
		o.SetNamespace(ns)
		if o.GetKind() == "Cluster" {
			cluster = o
			continue
		}
		g.Expect(c.Create(ctx, o)).To(gomega.Succeed(), "%s %s", o.GetKind(), o.GetName())
	}
	g.Expect(cluster).NotTo(gomega.BeNil(), "the flavor has no Cluster")
	mds, _, err := unstructured.NestedSlice(cluster.Object, "spec", "topology", "workers", "machineDeployments")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(mds).NotTo(gomega.BeEmpty())
	for _, md := range mds {
		md.(map[string]any)["replicas"] = int64(0)
	}
	g.Expect(unstructured.SetNestedSlice(cluster.Object, mds, "spec", "topology", "workers", "machineDeployments")).To(gomega.Succeed())

	bad := cluster.DeepCopy()
	vars, _, _ := unstructured.NestedSlice(bad.Object, "spec", "topology", "variables")
	found := false
	for _, v := range vars {
		if v.(map[string]any)["name"] == badVariable {
			v.(map[string]any)["value"] = map[string]any{"not": "a string"}
			found = true
		}
	}
	g.Expect(found).To(gomega.BeTrue(), "the flavor's Cluster sets no variable %s", badVariable)
	g.Expect(unstructured.SetNestedSlice(bad.Object, vars, "spec", "topology", "variables")).To(gomega.Succeed())
	g.Expect(c.Create(ctx, bad, client.DryRunAll)).To(gomega.MatchError(gomega.ContainSubstring(badVariable)), "CAPI's webhook should refuse a %s outside its schema", badVariable)

	g.Expect(c.Create(ctx, cluster)).To(gomega.Succeed())
	t.Cleanup(func() {
		ctx := context.Background()
		_ = c.Delete(ctx, cluster)
		err := stack.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(cluster), &clusterv1.Cluster{})), nil
		})
		if err != nil {
			t.Errorf("Cluster %s/%s was not deleted: %v", ns, cluster.GetName(), err)
		}
	})

	var list clusterv1.MachineDeploymentList
	err = stack.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return len(list.Items) == len(mds), nil
	})
	g.Expect(err).NotTo(gomega.HaveOccurred(), "the topology controller did not create %d MachineDeployments; CAPI log:\n%s", len(mds), s.ManagerLog("cluster-api", 30))
	for _, md := range list.Items {
		get := func(apiGroup, kind, name string) *unstructured.Unstructured {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(apiGroup + "/v1alpha1")
			u.SetKind(kind)
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)).To(gomega.Succeed(), "%s %s", kind, name)
			return u
		}
		b, i := md.Spec.Template.Spec.Bootstrap.ConfigRef, md.Spec.Template.Spec.InfrastructureRef
		check(g, md.Labels[clusterv1.ClusterTopologyMachineDeploymentNameLabel], get(b.APIGroup, b.Kind, b.Name), get(i.APIGroup, i.Kind, i.Name))
	}
}
