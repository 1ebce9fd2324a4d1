package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/test/testbins"
)

// connectionFlags are kubectl's global flags that select a cluster, credentials and namespace: the plugin
// must offer each on every command, with kubectl's name, shorthand, default and meaning.
var connectionFlags = []string{"kubeconfig", "context", "cluster", "user", "namespace", "server", "token", "as", "as-group", "as-uid",
	"as-user-extra", "username", "password", "certificate-authority", "client-certificate", "client-key", "tls-server-name",
	"insecure-skip-tls-verify", "request-timeout", "cache-dir", "disable-compression"}

// kubectlFlag is one entry of `kubectl options`.
type kubectlFlag struct{ shorthand, def, usage string }

// kubectlOptions parses the real kubectl's `kubectl options`: "    -n, --namespace=”:\n\tUsage…".
func kubectlOptions(t *testing.T, g *WithT) map[string]kubectlFlag {
	t.Helper()
	kubectl, err := testbins.Path("kubectl")
	g.Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(kubectl, "options")
	cmd.Env = []string{"HOME=" + os.Getenv("HOME"), "PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred())
	re := regexp.MustCompile(`(?m)^\s+(?:-(\w), )?--([\w-]+)=(.*):\n\t(.*)$`)
	flags := map[string]kubectlFlag{}
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		def := strings.Trim(m[3], "'")
		flags[m[2]] = kubectlFlag{shorthand: m[1], def: def, usage: strings.TrimSpace(m[4])}
	}
	g.Expect(flags).To(HaveKey("namespace"), string(out))
	return flags
}

func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, allCommands(sub)...)
	}
	return out
}

// kubectl plugin conventions, against the real kubectl: every command has each of kubectl's connection
// flags under kubectl's name and shorthand, with kubectl's default and usage text, and no command shadows
// one with a flag of its own; commands that print objects have -o.
func TestCommandsHaveKubectlsConnectionFlags(t *testing.T) {
	g := NewWithT(t)
	want := kubectlOptions(t, g)
	root := newRootCommand(cli.NewOptions())
	for _, cmd := range allCommands(root) {
		path := cmd.CommandPath()
		for _, name := range connectionFlags {
			k, ok := want[name]
			g.Expect(ok).To(BeTrue(), "kubectl options lists --%s", name)
			f := cmd.Flags().Lookup(name)
			if f == nil {
				f = cmd.InheritedFlags().Lookup(name)
			}
			if cmd == root {
				f = root.PersistentFlags().Lookup(name)
			}
			g.Expect(f).NotTo(BeNil(), "%s has --%s", path, name)
			g.Expect(cmd.LocalNonPersistentFlags().Lookup(name)).To(BeNil(), "%s shadows kubectl's --%s with its own flag", path, name)
			g.Expect(f.Shorthand).To(Equal(k.shorthand), "%s --%s shorthand", path, name)
			g.Expect(f.Usage).To(Equal(k.usage), "%s --%s means what it means in kubectl", path, name)
			if name != "cache-dir" { // kubectl prints the expanded default path
				g.Expect(f.DefValue).To(Equal(k.def), "%s --%s default", path, name)
			}
		}
	}
	for _, path := range [][]string{{"host", "list"}, {"describe", "cluster"}, {"version"}} {
		cmd, _, err := root.Find(path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cmd.Flags().ShorthandLookup("o")).NotTo(BeNil(), "%s has -o", strings.Join(path, " "))
	}
	for _, path := range [][]string{{"lab", "up"}, {"lab", "status"}, {"lab", "down"}, {"completion", "bash"}, {"version"}} {
		_, _, err := root.Find(path)
		g.Expect(err).NotTo(HaveOccurred(), strings.Join(path, " "))
	}
}

// writeKubeconfig writes a kubeconfig for the envtest apiserver with contexts "mgmt" (namespace ns),
// "insecure" (the same server without its CA) and "elsewhere" (a server nothing listens on, the current one).
func writeKubeconfig(t *testing.T, g *WithT, ns string) string {
	t.Helper()
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.Clusters["envtest-no-ca"] = &clientcmdapi.Cluster{Server: cfg.Host}
	kc.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:9", CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.AuthInfos["no-credentials"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["mgmt"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: ns}
	kc.Contexts["insecure"] = &clientcmdapi.Context{Cluster: "envtest-no-ca", AuthInfo: "admin", Namespace: ns}
	kc.Contexts["elsewhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: "admin", Namespace: ns}
	kc.CurrentContext = "elsewhere"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
	return path
}

// The connection flags select what they say against a real apiserver: --context picks the context and its
// namespace, -n overrides it, --cluster and --user pick the kubeconfig's entries, --insecure-skip-tls-verify
// skips the CA check, --as impersonates (RBAC then refuses that user), --request-timeout is parsed as
// kubectl parses it.
func TestConnectionFlagsSelectWhatTheySay(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	nsA := env.CreateNamespace(ctx, t, "conv-a").Name
	nsB := env.CreateNamespace(ctx, t, "conv-b").Name
	for ns, name := range map[string]string{nsA: "host-a", nsB: "host-b"} {
		h := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: infrav1.YonderSSHHostSpec{
			SSHEndpoint: infrav1.SSHEndpoint{Address: "192.0.2.1", CredentialsSecretRef: infrav1.SecretReference{Name: "s"}}}}
		g.Expect(env.Create(ctx, h)).To(Succeed())
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "reader"}}
	g.Expect(env.Create(ctx, sa)).To(Succeed())
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	g.Expect(env.SubResource("token").Create(ctx, sa, tr)).To(Succeed())
	token := tr.Status.Token
	g.Expect(token).NotTo(BeEmpty())
	const host = "yondersshhost.infrastructure.cluster.x-k8s.io/"
	kubeconfig := writeKubeconfig(t, g, nsA)
	// The namespaces of other tests hold hosts too: -A must list at least ours.
	all := MatchRegexp(`(?s)` + regexp.QuoteMeta(host+"host-a\n") + `.*` + regexp.QuoteMeta(host+"host-b\n"))
	run := func(args ...string) (string, error) {
		o := cli.NewOptions()
		out := &bytes.Buffer{}
		o.Out, o.ErrOut = out, out
		root := newRootCommand(o)
		root.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
		root.SetOut(out)
		root.SetErr(out)
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	for _, tc := range []struct {
		name    string
		args    []string
		want    types.GomegaMatcher
		wantErr string
	}{
		{name: "the current context", args: []string{"host", "list"}, wantErr: "127.0.0.1:9"},
		{name: "--context and its namespace", args: []string{"host", "list", "--context", "mgmt", "-o", "name"}, want: Equal(host + "host-a\n")},
		{name: "-n over the context's namespace", args: []string{"host", "list", "--context", "mgmt", "-n", nsB, "-o", "name"}, want: Equal(host + "host-b\n")},
		{name: "--namespace", args: []string{"host", "list", "--context", "mgmt", "--namespace", nsB, "-o", "name"}, want: Equal(host + "host-b\n")},
		{name: "--cluster of another context", args: []string{"host", "list", "--context", "elsewhere", "--cluster", "envtest", "-o", "name"}, want: Equal(host + "host-a\n")},
		{name: "--server", args: []string{"host", "list", "--context", "elsewhere", "--server", env.Config.Host, "-o", "name"}, want: Equal(host + "host-a\n")},
		{name: "--user selects the kubeconfig's user", args: []string{"host", "list", "--context", "mgmt", "--user", "nobody", "-o", "name"}, wantErr: "nobody"},
		{name: "no CA", args: []string{"host", "list", "--context", "insecure"}, wantErr: "certificate"},
		{name: "--insecure-skip-tls-verify", args: []string{"host", "list", "--context", "insecure", "--insecure-skip-tls-verify", "-o", "name"}, want: Equal(host + "host-a\n")},
		{name: "--as", args: []string{"host", "list", "--context", "mgmt", "--as", "jane"}, wantErr: `User "jane" cannot list resource "yondersshhosts"`},
		{name: "--as-group", args: []string{"host", "list", "--context", "mgmt", "--as", "jane", "--as-group", "ops"}, wantErr: `User "jane"`},
		{name: "--token", args: []string{"host", "list", "--context", "insecure", "--insecure-skip-tls-verify", "--user", "no-credentials", "--token", "not-a-token"}, wantErr: "the server has asked for the client to provide credentials"},
		{name: "--token of a ServiceAccount", args: []string{"host", "list", "--context", "insecure", "--insecure-skip-tls-verify", "--user", "no-credentials", "--token", token},
			wantErr: `User "system:serviceaccount:` + nsA + `:reader" cannot list resource "yondersshhosts"`},
		{name: "--request-timeout", args: []string{"host", "list", "--context", "mgmt", "--request-timeout", "30s", "-o", "name"}, want: Equal(host + "host-a\n")},
		{name: "--request-timeout malformed", args: []string{"host", "list", "--context", "mgmt", "--request-timeout", "soon"}, wantErr: "Invalid timeout value"},
		{name: "-A", args: []string{"host", "list", "--context", "mgmt", "-A", "-o", "name"}, want: all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := run(tc.args...)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)), out)
				return
			}
			g.Expect(err).NotTo(HaveOccurred(), out)
			g.Expect(out).To(tc.want)
		})
	}
}
