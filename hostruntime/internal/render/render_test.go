package render

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

func input() Input {
	return Input{
		Config: &agentv1.AgentConfig{
			NodeName:         "edge-1",
			Taints:           []agentv1.Taint{{Key: "yonder.dev/edge", Effect: "NoSchedule"}},
			KubeletExtraArgs: []agentv1.Arg{{Name: "max-pods", Value: "50"}},
		},
		ProviderID:   "yonder-ssh://ns/host-1",
		Labels:       map[string]string{"b": "2", "a": "1"},
		SandboxImage: "registry.k8s.io/pause:3.10",
		CNIBinDirs:   []string{"/opt/cni/bin", "/usr/lib/cni"},
		NodeIP:       "10.0.0.5",
	}
}

func TestKubeletConfigCarriesProviderIDTaintsAndTheNspawnKnobs(t *testing.T) {
	g := NewWithT(t)
	out, err := KubeletConfigYAML(input())
	g.Expect(err).NotTo(HaveOccurred())
	m := map[string]any{}
	g.Expect(json.Unmarshal([]byte(out), &m)).To(Succeed())
	g.Expect(m).To(HaveKeyWithValue("providerID", "yonder-ssh://ns/host-1"))
	g.Expect(m).To(HaveKeyWithValue("cgroupDriver", "cgroupfs"))
	g.Expect(m).To(HaveKeyWithValue("failCgroupV1", false))
	g.Expect(m).To(HaveKeyWithValue("failSwapOn", false))
	g.Expect(m).To(HaveKeyWithValue("rotateCertificates", true))
	g.Expect(m["registerWithTaints"]).To(Equal([]any{map[string]any{"key": "yonder.dev/edge", "effect": "NoSchedule"}}))
	again, _ := KubeletConfigYAML(input())
	g.Expect(again).To(Equal(out), "rendering must be deterministic so a re-run changes nothing")
}

func TestKubeletArgs(t *testing.T) {
	g := NewWithT(t)
	args := KubeletArgs(input())
	g.Expect(args).To(ContainElements("--hostname-override=edge-1", "--node-ip=10.0.0.5", "--node-labels=a=1,b=2", "--max-pods=50",
		"--bootstrap-kubeconfig="+KubeletBootstrapConfig))
}

func TestContainerdConfigNamesTheSandboxImageAndRestrictsOOMScoreAdj(t *testing.T) {
	g := NewWithT(t)
	out := ContainerdTOML(input())
	g.Expect(out).To(ContainSubstring(`sandbox = "registry.k8s.io/pause:3.10"`))
	g.Expect(out).To(ContainSubstring("restrict_oom_score_adj = true"))
	g.Expect(out).To(ContainSubstring(`runtime_type = "io.containerd.runc.v2"`))
	g.Expect(out).To(ContainSubstring(`bin_dirs = ["/opt/cni/bin", "/usr/lib/cni"]`))
	g.Expect(out).NotTo(ContainSubstring("nvidia"))
	in := input()
	in.NVIDIARuntime = true
	g.Expect(ContainerdTOML(in)).To(ContainSubstring("nvidia-container-runtime"))
}

func TestBootstrapKubeconfigHoldsTheTokenOnlyWhenAsked(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Kubeconfig("https://cp:6443", "abcdef.0123456789abcdef", "")).To(ContainSubstring("token: abcdef.0123456789abcdef"))
	k := Kubeconfig("https://cp:6443", "", KubeletClientCert)
	g.Expect(k).NotTo(ContainSubstring("token"))
	g.Expect(k).To(ContainSubstring("client-certificate: " + KubeletClientCert))
}

func TestCNIConflistIsValidJSONWithThePodCIDR(t *testing.T) {
	g := NewWithT(t)
	m := map[string]any{}
	g.Expect(json.Unmarshal([]byte(CNIConflist("10.244.3.0/24")), &m)).To(Succeed())
	g.Expect(CNIConflist("10.244.3.0/24")).To(ContainSubstring(`"subnet": "10.244.3.0/24"`))
	// Pods leave the Node masqueraded: nothing routes the Node's pod CIDR back to it (test/e2e's pod check
	// has each Node's pods reach the API server).
	plugins, ok := m["plugins"].([]any)
	g.Expect(ok).To(BeTrue())
	g.Expect(plugins).NotTo(BeEmpty())
	g.Expect(plugins[0]).To(HaveKeyWithValue("type", "bridge"))
	g.Expect(plugins[0]).To(HaveKeyWithValue("ipMasq", true))
}

func TestUnitsStartInOrder(t *testing.T) {
	g := NewWithT(t)
	u := Units()
	g.Expect(u).To(HaveKey("yonder-prep.service"))
	g.Expect(u["containerd.service"]).To(ContainSubstring("After=yonder-prep.service"))
	g.Expect(u["kubelet.service"]).To(ContainSubstring("After=containerd.service yonder-images.service"))
	g.Expect(u["yonder-images.service"]).To(ContainSubstring("ctr -n k8s.io images import"))
	g.Expect(strings.Count(KubeletEnv(input()), "\n")).To(Equal(2))
}
