package machine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
)

// fakeAgent stands in for yonder-agent on the host: it records how it was called and the AgentConfig it
// was given (the real agent's bootstrap is tested in hostruntime). Everything around it is real: the
// installer verifies its sha256, the one-liner runs over SSH in a namespace host, and the token is a real
// bootstrap token the workload apiserver authenticates.
const fakeAgent = `#!/bin/sh
echo "$@" > /etc/yonder/agent-args
cp "$3" /etc/yonder/seen-config.yaml
`

// The story: an operator prints the one-liner and pipes it to `ssh host bash`; the host ends up with the
// verified agent and an AgentConfig whose token authenticates as a Yonder bootstrapper.
func TestManualBootstrapJoinsAHostOverSSH(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	cp, err := controlplane.Start(ctx, controlplane.Options{Name: "manual", BindAddress: n.Gateway})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	hs, err := hosts.Start(ctx, n, "mb", 1, hosts.Options{PrivateDirs: []string{"/etc/yonder", "/usr/local/lib/yonder", "/usr/local/bin"}})
	g.Expect(err).NotTo(HaveOccurred())
	h := hs[0]

	ns := edgeCluster(t, cp)
	agentFile := filepath.Join(t.TempDir(), "yonder-agent")
	g.Expect(os.WriteFile(agentFile, []byte(fakeAgent), 0o755)).To(Succeed())
	sum := sha256.Sum256([]byte(fakeAgent))

	out, errOut := &bytes.Buffer{}, &bytes.Buffer{}
	o := cli.NewOptions().WithConfig(env.Config, ns)
	o.Out, o.ErrOut = out, errOut
	g.Expect(ManualBootstrap(ctx, o, &BootstrapOptions{
		NodeName: "edge-7", Cluster: "edge", TTL: 10 * time.Minute, AgentPath: agentFile, AgentSHA256: hex.EncodeToString(sum[:]),
		Site: "site-a", Labels: []string{"yonder.dev/pool=manual"},
	})).To(Succeed())
	line := out.String()
	g.Expect(strings.Count(strings.TrimSpace(line), "\n")).To(BeZero(), "one line")
	g.Expect(errOut.String()).To(ContainSubstring("Created bootstrap token"))

	// … | ssh root@host bash
	sc, err := h.Dial(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = sc.Close() }()
	s, err := sc.NewSession()
	g.Expect(err).NotTo(HaveOccurred())
	s.Stdin = strings.NewReader(line)
	combined, err := s.CombinedOutput("bash")
	g.Expect(err).NotTo(HaveOccurred(), string(combined))

	args, err := h.Output(ctx, "cat /etc/yonder/agent-args")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(args)).To(Equal("bootstrap --config " + agentv1.DefaultPath))
	mode, err := h.Output(ctx, "stat -c %a "+agentv1.DefaultPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(mode)).To(Equal("600"), "the config holds the token")
	raw, err := h.Output(ctx, "cat /etc/yonder/seen-config.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := agentv1.Decode([]byte(raw))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.NodeName).To(Equal("edge-7"))
	g.Expect(cfg.KubernetesVersion).To(Equal("v1.36.3"))
	g.Expect(cfg.Site).To(Equal("site-a"))
	g.Expect(cfg.Labels).To(HaveKeyWithValue("yonder.dev/pool", "manual"))
	g.Expect(cfg.APIServer.Endpoint).To(Equal(cp.Endpoint))
	g.Expect(cfg.APIServer.CACertificate).To(Equal(string(cp.CACertPEM)))

	expectBootstrapperToken(t, cp, cfg.BootstrapToken)
}

// edgeCluster creates, in a namespace of its own, the Cluster "edge" whose control plane is cp: a generic
// control plane that reports the version the kubelet gets (CAPI's test control plane kind), and cp's
// kubeconfig Secret. It returns the namespace.
func edgeCluster(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "manual").Name
	gcp := &unstructured.Unstructured{}
	gcp.SetAPIVersion(builder.ControlPlaneGroupVersion.String())
	gcp.SetKind(builder.GenericControlPlaneKind)
	gcp.SetNamespace(ns)
	gcp.SetName("edge-cp")
	g.Expect(env.Create(ctx, gcp)).To(Succeed())
	g.Expect(unstructured.SetNestedField(gcp.Object, "v1.36.3", "status", "version")).To(Succeed())
	g.Expect(env.Status().Update(ctx, gcp)).To(Succeed())
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: cp.Host.String(), Port: int32(cp.Port)},
			ControlPlaneRef:      clusterv1.ContractVersionedObjectReference{APIGroup: builder.ControlPlaneGroupVersion.Group, Kind: builder.GenericControlPlaneKind, Name: "edge-cp"},
		}}
	g.Expect(env.Create(ctx, cluster)).To(Succeed())
	g.Expect(cp.WriteKubeconfigSecret(ctx, env.Client, cluster)).To(Succeed())
	return ns
}

// expectBootstrapperToken: the token is real, scoped to Yonder's bootstrapper group, and expires.
func expectBootstrapperToken(t *testing.T, cp *controlplane.ControlPlane, token string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	wl, err := cp.Client()
	g.Expect(err).NotTo(HaveOccurred())
	id := strings.SplitN(token, ".", 2)[0]
	sec := &corev1.Secret{}
	g.Expect(wl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + id}, sec)).To(Succeed())
	g.Expect(sec.Data).To(HaveKey("expiration"))
	g.Expect(sec.Data).NotTo(HaveKey("usage-bootstrap-signing"))
	exp, err := time.Parse(time.RFC3339, string(sec.Data["expiration"]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exp).To(BeTemporally("~", time.Now().Add(10*time.Minute), time.Minute))
	asToken := rest.AnonymousClientConfig(cp.Config)
	asToken.BearerToken = token
	tc, err := client.New(asToken, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	// The apiserver authenticates bootstrap tokens from an informer: a new token works once it has seen it.
	review := &authenticationv1.SelfSubjectReview{}
	g.Eventually(func() error {
		review = &authenticationv1.SelfSubjectReview{}
		return tc.Create(ctx, review)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(review.Status.UserInfo.Username).To(Equal("system:bootstrap:" + id))
	g.Expect(review.Status.UserInfo.Groups).To(ContainElement("system:bootstrappers:yonder:worker"))
}

func TestManualBootstrapRejectsBadInputBeforeCreatingAToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    BootstrapOptions
		want string
	}{
		{"bad node name", BootstrapOptions{NodeName: "Edge_7", Cluster: "c", TTL: time.Hour, AgentURL: "https://x/a", AgentSHA256: strings.Repeat("a", 64)}, "not a valid Node name"},
		// No flag and no bootstrap provider installed whose defaults would do.
		{"no agent", BootstrapOptions{NodeName: "e", Cluster: "c", TTL: time.Hour, AgentSHA256: strings.Repeat("a", 64)}, "--agent-url"},
		{"two agents", BootstrapOptions{NodeName: "e", Cluster: "c", TTL: time.Hour, AgentURL: "https://x/a", AgentPath: "/a", AgentSHA256: strings.Repeat("a", 64)}, "at most one of --agent-url and --agent-path"},
		{"no registry CA file", BootstrapOptions{NodeName: "e", Cluster: "c", TTL: time.Hour, RegistryCAFile: "/nonexistent/ca.crt"}, "--registry-ca-file"},
		{"bad sha", BootstrapOptions{NodeName: "e", Cluster: "c", TTL: time.Hour, AgentURL: "https://x/a", AgentSHA256: "abc"}, "sha256"},
		{"ttl too long", BootstrapOptions{NodeName: "e", Cluster: "c", TTL: 48 * time.Hour, AgentURL: "https://x/a", AgentSHA256: strings.Repeat("a", 64)}, "1m…24h"},
		{"bad label", BootstrapOptions{NodeName: "e", Cluster: "c", TTL: time.Hour, AgentURL: "https://x/a", AgentSHA256: strings.Repeat("a", 64), Labels: []string{"kubernetes.io/x=y z"}}, "labels"},
		{"missing cluster", BootstrapOptions{NodeName: "e", Cluster: "nope", TTL: time.Hour, AgentURL: "https://x/a", AgentSHA256: strings.Repeat("a", 64), KubernetesVersion: "v1.36.3"}, "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := cli.NewOptions().WithConfig(env.Config, "default")
			o.Out, o.ErrOut = &bytes.Buffer{}, &bytes.Buffer{}
			g.Expect(ManualBootstrap(context.Background(), o, &tc.b)).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

// The installed bootstrap provider's flags are read in both spellings its Deployment may use.
func TestFlagValueReadsBothSpellings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--leader-elect", "--image-repository", "registry.example:5000/yonder-dev", "--agent-sha256", "ab"}, "registry.example:5000/yonder-dev"},
		{[]string{"--image-repository=mirror.example/yonder"}, "mirror.example/yonder"},
		// An empty value (clusterctl's "" for an unset variable) is the empty string, not the next flag.
		{[]string{"--image-repository", "", "--agent-sha256", "ab"}, ""},
		{[]string{"--image-repository", "--agent-sha256", "ab"}, ""},
		{[]string{"--agent-sha256", "ab"}, ""},
	} {
		NewWithT(t).Expect(flagValue(tc.args, "--image-repository")).To(Equal(tc.want), "%v", tc.args)
	}
}
