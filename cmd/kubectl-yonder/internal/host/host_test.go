package host

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
)

// options are the plugin's options against the test's API server in namespace ns, and its output.
func options(ns string) (*cli.Options, *bytes.Buffer) {
	out := &bytes.Buffer{}
	o := cli.NewOptions().WithConfig(env.Config, ns)
	o.Out, o.ErrOut = out, &bytes.Buffer{}
	return o, out
}

// keyFile writes the host's client key into a file of the test.
func keyFile(t *testing.T, h *hosts.Host) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(p, h.ClientKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The story of issue 11: `host add` against a real sshd in a namespace pins exactly the key that sshd
// has, creates the credentials Secret, and later refuses the host when it presents another key.
func TestAddPinsTheHostKeyAndRefusesAChangedKey(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	// Both hosts authorize the same client key, so the only difference the CLI can see is the host key.
	clientKey, _, err := hosts.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	hs, err := hosts.Start(ctx, n, "add", 2, hosts.Options{ClientKeyPEM: clientKey})
	g.Expect(err).NotTo(HaveOccurred())
	ns := env.CreateNamespace(ctx, t, "host-add").Name
	o, out := options(ns)
	key := keyFile(t, hs[0])

	g.Expect(Add(ctx, o, &AddOptions{Name: "edge-1", Address: hs[0].Address.String(), Port: 22, User: "root", KeyFile: key,
		Labels: []string{"site=a", "yonder.dev/pool=gpu"}, FailureDomain: "site-a", Timeout: 10 * 1e9})).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("edge-1 created"))

	h := &infrav1.YonderSSHHost{}
	g.Expect(apiGet(ctx, client.ObjectKey{Namespace: ns, Name: "edge-1"}, h)).To(Succeed())
	pinned, err := parseKey(h.Spec.HostKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pinned.Marshal()).To(Equal(hs[0].HostKey.Marshal()), "the pinned key is the one sshd really has")
	g.Expect(h.Spec.HostKeyPolicy).To(Equal(infrav1.HostKeyPolicyPinned))
	g.Expect(h.Spec.CredentialsSecretRef.Name).To(Equal("edge-1-ssh"))
	g.Expect(h.Spec.FailureDomain).To(Equal("site-a"))
	g.Expect(h.Labels).To(HaveKeyWithValue("yonder.dev/pool", "gpu"))
	sec := &corev1.Secret{}
	g.Expect(apiGet(ctx, client.ObjectKey{Namespace: ns, Name: "edge-1-ssh"}, sec)).To(Succeed())
	g.Expect(sec.Data[PrivateKeyKey]).To(Equal(hs[0].ClientKeyPEM))

	// Adding again is idempotent while the key is the same.
	g.Expect(Add(ctx, o, &AddOptions{Name: "edge-1", Address: hs[0].Address.String(), Port: 22, User: "root", KeyFile: key, Timeout: 10 * 1e9})).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("edge-1 configured"))

	// The "same" host now answers with another key (hs[1] plays the re-installed or spoofed host).
	before := h.DeepCopy()
	err = Add(ctx, o, &AddOptions{Name: "edge-1", Address: hs[1].Address.String(), Port: 22, User: "root", KeyFile: key, Timeout: 10 * 1e9})
	g.Expect(err).To(MatchError(ContainSubstring("host key mismatch")))
	g.Expect(err).To(MatchError(ContainSubstring("nothing was changed")))
	g.Expect(apiGet(ctx, client.ObjectKey{Namespace: ns, Name: "edge-1"}, h)).To(Succeed())
	g.Expect(h.Spec).To(Equal(before.Spec), "a refused key changes nothing")

	// --host-key that does not match what the host presents: refused, nothing created.
	err = Add(ctx, o, &AddOptions{Name: "edge-2", Address: hs[1].Address.String(), Port: 22, User: "root", KeyFile: key,
		HostKey: FormatKey(hs[0].HostKey), Timeout: 10 * 1e9})
	g.Expect(err).To(MatchError(ContainSubstring("host key mismatch")))
	g.Expect(apiGet(ctx, client.ObjectKey{Namespace: ns, Name: "edge-2"}, &infrav1.YonderSSHHost{})).NotTo(Succeed())

	// --host-key that matches: accepted.
	g.Expect(Add(ctx, o, &AddOptions{Name: "edge-2", Address: hs[1].Address.String(), Port: 22, User: "root", KeyFile: key,
		HostKey: FormatKey(hs[1].HostKey) + " comment", Timeout: 10 * 1e9})).To(Succeed())
}

// A host behind a bastion: both keys are pinned, and the bastion's changed key is refused.
func TestAddThroughBastion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	client0, _, err := hosts.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	hs, err := hosts.Start(ctx, n, "bst", 2, hosts.Options{ClientKeyPEM: client0})
	g.Expect(err).NotTo(HaveOccurred())
	ns := env.CreateNamespace(ctx, t, "host-bastion").Name
	o, _ := options(ns)
	key := keyFile(t, hs[0])

	g.Expect(Add(ctx, o, &AddOptions{Name: "behind", Address: hs[1].Address.String(), Port: 22, User: "root", KeyFile: key,
		Bastion: "root@" + hs[0].Address.String() + ":22", Timeout: 10 * 1e9})).To(Succeed())
	h := &infrav1.YonderSSHHost{}
	g.Expect(apiGet(ctx, client.ObjectKey{Namespace: ns, Name: "behind"}, h)).To(Succeed())
	g.Expect(h.Spec.HostKey).To(Equal(FormatKey(hs[1].HostKey)))
	g.Expect(h.Spec.Bastion).NotTo(BeNil())
	g.Expect(h.Spec.Bastion.HostKey).To(Equal(FormatKey(hs[0].HostKey)))
	g.Expect(h.Spec.Bastion.Address).To(Equal(hs[0].Address.String()))

	err = Add(ctx, o, &AddOptions{Name: "behind2", Address: hs[1].Address.String(), Port: 22, User: "root", KeyFile: key,
		Bastion: hs[0].Address.String(), BastionKey: FormatKey(hs[1].HostKey), Timeout: 10 * 1e9})
	g.Expect(err).To(MatchError(ContainSubstring("bastion")))
	g.Expect(err).To(MatchError(ContainSubstring("host key mismatch")))
}

func TestAddRejectsBadInputBeforeConnecting(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    AddOptions
		want string
	}{
		{"bad name", AddOptions{Name: "Edge_1", Address: "h", Port: 22, User: "root", KeyFile: "k"}, "NAME"},
		{"no address", AddOptions{Name: "e", Port: 22, User: "root", KeyFile: "k"}, "--address"},
		{"bad port", AddOptions{Name: "e", Address: "h", Port: 70000, User: "root", KeyFile: "k"}, "--port"},
		{"bad host key", AddOptions{Name: "e", Address: "h", Port: 22, User: "root", KeyFile: "k", HostKey: "ssh-ed25519 nope"}, "--host-key"},
		{"bad label", AddOptions{Name: "e", Address: "h", Port: 22, User: "root", KeyFile: "k", Labels: []string{"novalue"}}, "key=value"},
		{"bad label value", AddOptions{Name: "e", Address: "h", Port: 22, User: "root", KeyFile: "k", Labels: []string{"a=b c"}}, "label value"},
		{"bastion key without bastion", AddOptions{Name: "e", Address: "h", Port: 22, User: "root", KeyFile: "k", BastionKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFx8Wy3KWj+FK4Lm7SEfHq3bydFs8Bl0EHKqMxHhYw2O"}, "needs --bastion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := cli.NewOptions().WithConfig(env.Config, "default")
			err := Add(context.Background(), o, &tc.a)
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestListShowsClaimState(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "host-list").Name
	_, signer, err := hosts.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	hostKey := FormatKey(signer.PublicKey())
	free := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "free"}, Spec: infrav1.YonderSSHHostSpec{
		SSHEndpoint: infrav1.SSHEndpoint{Address: "10.0.0.1", CredentialsSecretRef: infrav1.SecretReference{Name: "s"}, HostKey: hostKey}, FailureDomain: "a"}}
	taken := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}, Spec: infrav1.YonderSSHHostSpec{
		SSHEndpoint: infrav1.SSHEndpoint{Address: "10.0.0.2", Port: 2222, CredentialsSecretRef: infrav1.SecretReference{Name: "s"}},
		ConsumerRef: &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: "md-abc", UID: "u", ClusterName: "edge"}}}
	g.Expect(env.Create(ctx, free)).To(Succeed())
	g.Expect(env.Create(ctx, taken)).To(Succeed())
	free.Status.Phase = infrav1.HostPhaseAvailable
	free.Status.Facts = &infrav1.HostFacts{OS: "Ubuntu 24.04.3 LTS", GPUs: []string{"NVIDIA H200", "Intel GPU 0x3e92", "NVIDIA H200"}}
	g.Expect(env.Status().Update(ctx, free)).To(Succeed())

	o, out := options(ns)
	g.Expect(List(ctx, o, false)).To(Succeed())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	g.Expect(lines).To(HaveLen(3))
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "ADDRESS", "PHASE", "CLAIMED", "BY", "CLUSTER", "FAILURE", "DOMAIN", "AGE"}))
	g.Expect(strings.Fields(lines[1])[:6]).To(Equal([]string{"free", "10.0.0.1", "Available", "-", "-", "a"}))
	g.Expect(strings.Fields(lines[2])[:6]).To(Equal([]string{"taken", "10.0.0.2:2222", "Claimed", "YonderSSHMachine/md-abc", "edge", "-"}))

	out.Reset()
	o.Output = cli.OutputWide
	g.Expect(List(ctx, o, false)).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring(ssh.FingerprintSHA256(signer.PublicKey())))
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	g.Expect(lines[0]).To(MatchRegexp(`HOST KEY +OS +GPUS +AGENT$`))
	g.Expect(lines[1]).To(MatchRegexp(`Ubuntu 24\.04\.3 LTS +2x NVIDIA H200, 1x Intel GPU 0x3e92 +false$`))
	g.Expect(lines[2]).To(MatchRegexp(`- +- +-$`), "a host not probed yet has no OS, GPUs or agent to show")

	out.Reset()
	o.Output = cli.OutputYAML
	g.Expect(List(ctx, o, false)).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("kind: List"))
	g.Expect(out.String()).To(ContainSubstring("kind: YonderSSHHost"))
	g.Expect(out.String()).To(ContainSubstring("name: md-abc"))

	o.Output = "toml"
	g.Expect(List(ctx, o, false)).To(MatchError(ContainSubstring("unknown output format")))
}

// apiGet reads from the apiserver, not the test manager's cache: the plugin writes with its own client, so
// the cache may not have seen the write yet (and a "not found" from a cache proves nothing).
func apiGet(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	return env.Manager.GetAPIReader().Get(ctx, key, obj)
}
