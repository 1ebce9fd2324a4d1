package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/version"
	"github.com/yonder-dev/yonder/test/gobuild"
	"github.com/yonder-dev/yonder/test/testbins"
)

// run executes the plugin's root command in-process with args and returns what it printed.
func runPlugin(ctx context.Context, args ...string) (string, error) {
	o := cli.NewOptions()
	out := &bytes.Buffer{}
	o.Out, o.ErrOut = out, out
	root := newRootCommand(o)
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(out)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// `version` prints the plugin's build and the providers clusterctl recorded in the management cluster; an
// unreachable cluster is reported and the plugin's version still printed.
func TestVersionShowsThePluginAndTheInstalledProviders(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "version").Name
	for _, p := range []clusterctlv1.Provider{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infrastructure-yonder-ssh"}, ProviderName: "yonder-ssh", Type: string(clusterctlv1.InfrastructureProviderType), Version: "v0.1.0"},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bootstrap-yonder"}, ProviderName: "yonder", Type: string(clusterctlv1.BootstrapProviderType), Version: "v0.1.0"},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-api"}, ProviderName: "cluster-api", Type: string(clusterctlv1.CoreProviderType), Version: "v1.14.2"},
	} {
		g.Expect(env.Create(ctx, p.DeepCopy())).To(Succeed())
	}
	kubeconfig := writeKubeconfig(t, g, ns)

	out, err := runPlugin(ctx, "version", "--kubeconfig", kubeconfig, "--context", "mgmt", "-o", "json")
	g.Expect(err).NotTo(HaveOccurred(), out)
	info := version.Info{}
	g.Expect(json.Unmarshal([]byte(out), &info)).To(Succeed(), out)
	g.Expect(info.Client).To(Equal(version.ClientInfo()))
	g.Expect(info.Client.Version).To(Equal("dev"), "a plugin built without the release's -ldflags")
	g.Expect(info.Server).To(Equal(env.Config.Host))
	g.Expect(info.ServerError).To(BeEmpty())
	g.Expect(info.Providers).To(Equal([]version.Provider{
		{Name: "yonder", Type: "BootstrapProvider", Namespace: ns, Version: "v0.1.0"},
		{Name: "cluster-api", Type: "CoreProvider", Namespace: ns, Version: "v1.14.2"},
		{Name: "yonder-ssh", Type: "InfrastructureProvider", Namespace: ns, Version: "v0.1.0"},
	}))

	out, err = runPlugin(ctx, "version", "--kubeconfig", kubeconfig, "--context", "mgmt")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(MatchRegexp(`(?m)^kubectl-yonder dev \(commit `))
	g.Expect(out).To(MatchRegexp(`(?m)^yonder-ssh\s+InfrastructureProvider\s+` + ns + `\s+v0\.1\.0$`))

	out, err = runPlugin(ctx, "version", "--kubeconfig", kubeconfig, "--context", "elsewhere")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(MatchRegexp(`(?m)^Management cluster: unavailable: .*127\.0\.0\.1:9`))

	out, err = runPlugin(ctx, "version", "--client", "--kubeconfig", kubeconfig, "--context", "elsewhere", "-o", "yaml")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("clientVersion:"))
	g.Expect(out).NotTo(ContainSubstring("serverError"))

	_, err = runPlugin(ctx, "version", "-o", "toml")
	g.Expect(err).To(MatchError(ContainSubstring(`unknown output format "toml"`)))
}

var (
	buildOnce sync.Once
	pluginBin string
	buildErr  error
)

// pluginBinary builds the plugin once for the tests that run it as kubectl does.
func pluginBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kubectl-yonder-")
		if err != nil {
			buildErr = err
			return
		}
		pluginBin = filepath.Join(dir, "kubectl-yonder")
		buildErr = gobuild.Build(context.Background(), pluginBin, gobuild.Options{}, "./cmd/kubectl-yonder")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return pluginBin
}

// Shell completion: `completion bash|zsh|fish|powershell` print cobra's scripts, and the real kubectl
// completes `kubectl yonder …` through kubectl_complete-yonder (a link to the plugin): subcommands, and
// --context from the kubeconfig.
func TestKubectlCompletesThePlugin(t *testing.T) {
	g := NewWithT(t)
	bin := pluginBinary(t)
	for shell, marker := range map[string]string{"bash": "__start_kubectl-yonder", "zsh": "#compdef kubectl-yonder", "fish": "complete -c kubectl-yonder",
		"powershell": "Register-ArgumentCompleter"} {
		out, err := exec.Command(bin, "completion", shell).Output()
		g.Expect(err).NotTo(HaveOccurred(), shell)
		g.Expect(string(out)).To(ContainSubstring(marker), shell)
	}

	kubectl, err := testbins.Path("kubectl")
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	g.Expect(os.Symlink(bin, filepath.Join(dir, "kubectl-yonder"))).To(Succeed())
	g.Expect(os.Symlink(bin, filepath.Join(dir, "kubectl_complete-yonder"))).To(Succeed())
	kubeconfig := writeKubeconfig(t, g, "default")
	complete := func(args ...string) []string {
		cmd := exec.Command(kubectl, append([]string{"__complete", "yonder"}, args...)...)
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "HOME=" + t.TempDir(), "KUBECONFIG=" + kubeconfig}
		out, err := cmd.Output()
		g.Expect(err).NotTo(HaveOccurred(), strings.Join(args, " "))
		var words []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !strings.HasPrefix(l, ":") { // the last line is cobra's directive
				words = append(words, strings.SplitN(l, "\t", 2)[0])
			}
		}
		return words
	}
	g.Expect(complete("ho")).To(Equal([]string{"host"}))
	g.Expect(complete("describe", "")).To(ContainElement("cluster"))
	g.Expect(complete("host", "list", "--context", "")).To(ConsistOf("elsewhere", "insecure", "mgmt"))
	g.Expect(complete("host", "list", "--context", "m")).To(Equal([]string{"mgmt"}))
}
