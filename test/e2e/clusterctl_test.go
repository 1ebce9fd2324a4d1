package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/flavorcheck"
	"github.com/yonder-dev/yonder/test/stack"
)

// TestClusterctlRepository checks the local repository `make release-manifests` lays out, with the real
// clusterctl: every provider describes itself and writes its components with all variables defaulted, and
// every flavor renders; the ssh flavors' output is accepted by the stack's apiserver with CAPI's webhooks
// and ours (test/flavorcheck: a dry run; ClusterClass flavors created for real so the topology controller
// runs the class's patches, and a variable outside the class's schema is refused). This stack runs no metal
// provider: test/e2e/metal's TestMetalFlavors puts the metal flavors through the same checks.
func TestClusterctlRepository(t *testing.T) {
	ctx := context.Background()
	for _, p := range []struct {
		flag, name, namespace string
		wantVars              []string
	}{
		{"--core", "cluster-api", "capi-system", []string{"CLUSTER_TOPOLOGY"}},
		{"--bootstrap", "yonder", "bootstrap-yonder-system", []string{"YONDER_WATCH_FILTER", "YONDER_WATCH_NAMESPACE", "YONDER_AGENT_URL", "YONDER_AGENT_SHA256", "YONDER_IMAGE_REPOSITORY"}},
		{"--control-plane", "yonder", "control-plane-yonder-system", []string{"YONDER_WATCH_FILTER", "YONDER_WATCH_NAMESPACE"}},
		{"--infrastructure", "yonder-ssh", "infrastructure-yonder-ssh-system", []string{"YONDER_WATCH_FILTER", "YONDER_WATCH_NAMESPACE", "YONDER_SSH_HOST_PROBE_INTERVAL", "YONDER_SSH_CLEANUP_RETRIES"}},
		{"--infrastructure", "yonder-metal", "infrastructure-yonder-metal-system", []string{"YONDER_WATCH_FILTER"}},
	} {
		t.Run(p.flag+"="+p.name, func(t *testing.T) { checkProviderComponents(ctx, t, p.flag, p.name, p.namespace, p.wantVars) })
	}
	for _, f := range []struct {
		flavor, infra string
		env           []string
	}{
		{"ssh", "yonder-ssh", nil},
		{"ssh-clusterclass", "yonder-ssh", nil},
		{"ssh-multi-site", "yonder-ssh", nil},
		{"ssh-gpu", "yonder-ssh", nil},
		{"ssh-kubeadm", "yonder-ssh", []string{"YONDER_KUBEADM_IGNORE_PREFLIGHT_ERRORS=[SystemVerification]"}},
		{"ssh-kubeadm-cluster", "yonder-ssh", []string{"CONTROL_PLANE_ENDPOINT_HOST=192.0.2.10", "CONTROL_PLANE_MACHINE_COUNT=3"}},
		{"metal", "yonder-metal", metalEnv},
		{"metal-gpu", "yonder-metal", metalEnv},
		{"metal-kubeadm", "yonder-metal", metalEnv},
		{"metal-clusterclass", "yonder-metal", append([]string{"YONDER_GPU_MACHINE_COUNT=1"}, metalEnv...)},
	} {
		t.Run("flavor="+f.flavor, func(t *testing.T) { checkFlavor(ctx, t, f.flavor, f.infra, f.env) })
	}
}

// checkProviderComponents checks one provider of the repository: its description (namespace, pinned image,
// variables) and its components with every variable defaulted, all carrying the provider's label.
func checkProviderComponents(ctx context.Context, t *testing.T, flag, name, namespace string, wantVars []string) {
	t.Helper()
	g := NewWithT(t)
	out, err := st.ClusterctlOffline(ctx, nil, "generate", "provider", flag, name, "--describe")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("TargetNamespace:    " + namespace))
	if name != "cluster-api" {
		// release-manifests pins our images by the digest of the OCI archive it built.
		g.Expect(out).To(MatchRegexp(`ghcr.io/yonder-dev/yonder-[a-z-]+-manager@sha256:[0-9a-f]{64}`))
	}
	for _, v := range wantVars {
		g.Expect(out).To(ContainSubstring("- "+v), "variable %s not listed", v)
	}
	file := filepath.Join(t.TempDir(), "components.yaml")
	_, err = st.ClusterctlOffline(ctx, nil, "generate", "provider", flag, name, "--write-to", file)
	g.Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(file)
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := flavorcheck.Decode(data)
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		g.Expect(o.GetLabels()).To(HaveKeyWithValue("cluster.x-k8s.io/provider", providerLabel(flag, name)), "%s %s", o.GetKind(), o.GetName())
		// CAPI's contract label on our own kinds. Metal3's BareMetalHost CRD is not in any provider's
		// components (metal3-crds.yaml beside them): delete --include-crd must not take the inventory.
		g.Expect(o.GetName()).NotTo(HaveSuffix(".metal3.io"), "%s %s", o.GetKind(), o.GetName())
		if o.GetKind() == "CustomResourceDefinition" && name != "cluster-api" && strings.HasSuffix(o.GetName(), ".cluster.x-k8s.io") {
			g.Expect(o.GetLabels()).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1alpha1"), o.GetName())
		}
		if ns := o.GetNamespace(); ns != "" {
			g.Expect(ns).To(Equal(namespace), "%s %s", o.GetKind(), o.GetName())
		}
	}
	g.Expect(kinds).To(HaveKey("Deployment"))
	g.Expect(kinds).To(HaveKey("CustomResourceDefinition"))
	g.Expect(kinds).To(HaveKey("Certificate"))
	g.Expect(string(data)).NotTo(ContainSubstring("${"), "a variable was left unsubstituted")
}

// checkFlavor renders flavor with the real clusterctl and checks its objects; the ssh flavors' output is
// also put to the stack's apiserver (test/flavorcheck).
func checkFlavor(ctx context.Context, t *testing.T, flavor, infra string, env []string) {
	t.Helper()
	g := NewWithT(t)
	out, err := st.ClusterctlOffline(ctx, append([]string{"YONDER_CONTROL_PLANE_KUBECONFIG_SECRET=" + stack.WorkloadKubeconfigSecret}, env...),
		"generate", "cluster", "edge", "--infrastructure", infra+":v0.1.0", "--flavor", flavor,
		"--kubernetes-version", stack.KubernetesVersion, "--target-namespace", "default", "--worker-machine-count", "2")
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := flavorcheck.Decode([]byte(out))
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	g.Expect(kinds).To(HaveKeyWithValue("Cluster", 1))
	switch flavor {
	case "ssh-clusterclass", "metal-clusterclass":
		// clusterctl adds the ClusterClass and its templates; the health check lives in the class.
		g.Expect(kinds).To(HaveKeyWithValue("ClusterClass", 1))
		g.Expect(out).To(ContainSubstring("unhealthyNodeConditions"))
	case "ssh-multi-site":
		g.Expect(kinds).To(HaveKeyWithValue("MachineDeployment", 2))
		g.Expect(kinds).To(HaveKeyWithValue("ClusterResourceSet", 1))
		g.Expect(kinds).To(HaveKeyWithValue("MachineHealthCheck", 1))
		// The add-on's images are variables whose defaults the release repository pins by digest.
		g.Expect(out).To(MatchRegexp(`image: ghcr.io/yonder-dev/yonder-net-node@sha256:[0-9a-f]{64}\n`))
		g.Expect(out).To(MatchRegexp(`image: ghcr.io/yonder-dev/yonder-net-controller@sha256:[0-9a-f]{64}\n`))
	case "ssh-gpu":
		// The GPU pool on hosts the probe labelled with GPUs of the vendor; the general pool off them.
		g.Expect(kinds).To(HaveKeyWithValue("MachineDeployment", 2))
		g.Expect(kinds).To(HaveKeyWithValue("MachineHealthCheck", 2))
		g.Expect(kinds).To(HaveKeyWithValue("YonderSSHMachineTemplate", 2))
		for _, o := range objs {
			if o.GetKind() != "YonderSSHMachineTemplate" {
				continue
			}
			exprs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "hostSelector", "matchExpressions")
			g.Expect(err).NotTo(HaveOccurred())
			switch o.GetName() {
			case "edge-md-0":
				g.Expect(exprs).To(ConsistOf(map[string]any{"key": infrav1.GPUVendorLabel, "operator": "NotIn", "values": []any{"nvidia"}}))
			case "edge-md-gpu":
				g.Expect(exprs).To(ConsistOf(map[string]any{"key": infrav1.GPUCountLabel, "operator": "Exists"},
					map[string]any{"key": infrav1.GPUVendorLabel, "operator": "In", "values": []any{"nvidia"}}))
			default:
				t.Fatalf("unexpected YonderSSHMachineTemplate %s", o.GetName())
			}
		}
		g.Expect(out).To(ContainSubstring("key: nvidia.com/gpu\n"))
	case "metal-gpu":
		g.Expect(kinds).To(HaveKeyWithValue("MachineDeployment", 2))
		g.Expect(kinds).To(HaveKeyWithValue("MachineHealthCheck", 2))
		g.Expect(kinds).To(HaveKeyWithValue("YonderMetalMachineTemplate", 2))
		g.Expect(out).To(ContainSubstring("nvidia.com/gpu"))
	case "metal-kubeadm":
		// CABPK's data instead of YonderConfig's, written to the host's config drive.
		g.Expect(kinds).To(HaveKeyWithValue("KubeadmConfigTemplate", 1))
		g.Expect(kinds).NotTo(HaveKey("YonderConfigTemplate"))
		g.Expect(kinds).To(HaveKeyWithValue("MachineDeployment", 1))
		g.Expect(out).To(ContainSubstring("cloud-init query ds.meta_data.providerid"))
	case "ssh-kubeadm-cluster":
		// KCP instead of YonderControlPlane, at the endpoint given; workers and control plane on separate hosts.
		g.Expect(kinds).To(HaveKeyWithValue("KubeadmControlPlane", 1))
		g.Expect(kinds).NotTo(HaveKey("YonderControlPlane"))
		g.Expect(kinds).To(HaveKeyWithValue("YonderSSHMachineTemplate", 2))
		g.Expect(out).To(ContainSubstring("host: 192.0.2.10\n    port: 6443\n"))
		g.Expect(out).To(ContainSubstring("replicas: 3\n"))
		g.Expect(kinds).To(HaveKeyWithValue("MachineDeployment", 1))
	default:
		g.Expect(kinds).To(HaveKeyWithValue("MachineDeployment", 1))
		g.Expect(kinds).To(HaveKeyWithValue("MachineHealthCheck", 1))
	}
	g.Expect(strings.Contains(out, "${")).To(BeFalse(), "a variable was left unsubstituted")

	// The output must also be what the real apiserver, CAPI's webhooks and ours accept. This stack
	// has no metal provider: test/e2e/metal (TestMetalFlavors) checks the metal flavors on its own.
	if infra != "yonder-ssh" {
		return
	}
	ns := flavorcheck.Namespace(ctx, t, st.Client, "tpl-"+flavor)
	if kinds["ClusterClass"] == 0 {
		flavorcheck.DryRun(ctx, t, st.Client, ns, objs)
		return
	}
	flavorcheck.Topology(ctx, t, st, ns, "kubeconfigSecretName", objs, func(g Gomega, name string, bootstrap, infra *unstructured.Unstructured) {
		g.Expect(name).To(Equal("md-0"))
		g.Expect(bootstrap.GetKind()).To(Equal("YonderConfigTemplate"))
		g.Expect(infra.GetKind()).To(Equal("YonderSSHMachineTemplate"))
	})
}

// metalEnv are the variables a metal flavor needs beyond the common ones.
var metalEnv = []string{"YONDER_METAL_IMAGE_URL=http://images.example/yonder-live.iso"}

func providerLabel(flag, name string) string {
	switch flag {
	case "--core":
		return name
	case "--bootstrap":
		return "bootstrap-" + name
	case "--control-plane":
		return "control-plane-" + name
	}
	return "infrastructure-" + name
}
