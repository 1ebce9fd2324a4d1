package manager_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/gobuild"
	"github.com/yonder-dev/yonder/test/testpki"
)

// managers are the four providers' manager packages, which share Options.AddFlags and Options.Parse, and
// the network add-on's controller, whose Go flag.FlagSet has the same logging flags (AddGoLoggingFlags,
// ApplyLogging). Each binary is named after its package's last directory.
var managers = []string{"bootstrap", "controlplane", "infrastructure-ssh", "infrastructure-baremetal", "network/cmd/yonder-net-controller"}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// TestMain removes the managers managerBinaries built (five binaries, some 300 MB) when the tests end.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// managerBinaries builds the managers in one `go build`, once per test binary, and returns their
// directory (each binary is named after its package's last directory).
func managerBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "yonder-managers-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		pkgs := make([]string, 0, len(managers))
		for _, m := range managers {
			pkgs = append(pkgs, "./"+m)
		}
		buildErr = gobuild.Build(context.Background(), dir+"/", gobuild.Options{}, pkgs...)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// Every manager has the logging flags: by default it logs klog's text lines, as before the flags
// existed; with --logging-format=json the same line is a JSON object; an unknown format stops it at flag
// validation, with the flag's value and component-base's reason, before it looks for a kubeconfig. No
// kubeconfig is given here, so a manager that gets past its flags fails on that, and logs it.
func TestEveryManagerHasTheLoggingFlags(t *testing.T) {
	dir := managerBinaries(t)
	for _, pkg := range managers {
		m := filepath.Base(pkg)
		for _, tc := range []struct {
			format string
			want   types.GomegaMatcher
		}{
			{"", MatchRegexp(`(?m)^E\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w.]+:\d+\] "unable to get kubeconfig" err=`)},
			{"json", WithTransform(onlyJSONLine, And(
				HaveKeyWithValue("msg", "unable to get kubeconfig"), HaveKeyWithValue("logger", "controller-runtime.client.config"),
				HaveKeyWithValue("err", ContainSubstring("no configuration has been provided")), HaveKey("ts"), HaveKey("caller"),
			))},
			{"xml", And(
				ContainSubstring(`: failed to apply the logging flags (--logging-format=xml): format: Invalid value: "xml": Unsupported log format`),
				Not(ContainSubstring("kubeconfig")),
			)},
		} {
			name := tc.format
			if name == "" {
				name = "default"
			}
			t.Run(m+"/"+name, func(t *testing.T) {
				g := NewWithT(t)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var args []string
				if tc.format != "" {
					args = append(args, "--logging-format="+tc.format)
				}
				cmd := exec.CommandContext(ctx, filepath.Join(dir, m), args...)
				cmd.Env = []string{"HOME=" + t.TempDir(), "KUBECONFIG=" + filepath.Join(t.TempDir(), "absent")}
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				g.Expect(errors.As(err, &exit)).To(BeTrue(), "the manager must exit with an error: %v\n%s", err, out)
				g.Expect(exit.ExitCode()).To(Equal(1))
				g.Expect(string(out)).To(tc.want)
			})
		}
	}
}

// managerNames are the names each binary logs under (its setup.ControllerName; the net controller's own).
var managerNames = map[string]string{
	"bootstrap": "yonder-bootstrap-manager", "controlplane": "yonder-controlplane-manager", "infrastructure-ssh": "yonder-ssh-manager",
	"infrastructure-baremetal": "yonder-metal-manager", "yonder-net-controller": "yonder-net-controller",
}

// An error that run() returns after the logging flags are applied is one line of the chosen format, through
// the configured logger, and the exit status stays 1. The kubeconfig names an API server nobody listens on:
// the providers' managers fail in ctrl.NewManager, which asks the API server for the REST mapping of their
// label-filtered Secret cache; the net controller's clients connect lazily, so it fails on its health port,
// which another listener holds. Errors before the format is known stay plain text (the xml case above).
func TestRunErrorsFollowTheLoggingFormat(t *testing.T) {
	dir := managerBinaries(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	kubeconfig := unusedKubeconfig(t)
	for _, pkg := range managers {
		m := filepath.Base(pkg)
		args, cause := []string{"--leader-elect=false", "--metrics-bind-addr=0"}, "dial tcp 127.0.0.1:1: connect: connection refused"
		if m == "yonder-net-controller" {
			args = []string{"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=" + busy.Addr().String(), "--manage-webhook-certs=false"}
			cause = "listen tcp " + busy.Addr().String() + ": bind: address already in use"
		}
		t.Run(m+"/json", func(t *testing.T) {
			g := NewWithT(t)
			out := runFailing(g, filepath.Join(dir, m), kubeconfig, append(args, "--logging-format=json")...)
			g.Expect(parseJSONLines(g, out)).To(ContainElement(And(
				HaveKeyWithValue("msg", "Exiting on error"), HaveKeyWithValue("logger", managerNames[m]),
				HaveKeyWithValue("err", ContainSubstring(cause)), HaveKey("ts"), HaveKey("caller"),
			)))
		})
		t.Run(m+"/default", func(t *testing.T) {
			g := NewWithT(t)
			out := runFailing(g, filepath.Join(dir, m), kubeconfig, args...)
			g.Expect(string(out)).To(MatchRegexp(`(?m)^E\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w.]+:\d+\] "Exiting on error" err=".*%s.*" logger="%s"$`,
				regexp.QuoteMeta(cause), managerNames[m]))
		})
	}
	// The net controller's own check of its environment, the error an operator meets first when the
	// Deployment lacks the downward API's namespace.
	t.Run("yonder-net-controller/json/POD_NAMESPACE", func(t *testing.T) {
		g := NewWithT(t)
		out := runFailing(g, filepath.Join(dir, "yonder-net-controller"), kubeconfig, "--logging-format=json", "--leader-elect=false")
		lines := parseJSONLines(g, out)
		g.Expect(lines).To(HaveLen(1))
		g.Expect(lines[0]).To(And(HaveKeyWithValue("msg", "Exiting on error"), HaveKeyWithValue("logger", "yonder-net-controller"),
			HaveKeyWithValue("err", "POD_NAMESPACE must be set when --manage-webhook-certs is true")))
	})
}

// runFailing runs bin with args and the kubeconfig at kubeconfig, expects exit status 1 and returns what
// it wrote to stdout and stderr.
func runFailing(g Gomega, bin, kubeconfig string, args ...string) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// No POD_NAMESPACE: the net controller's case depends on its absence.
	cmd.Env = []string{"HOME=" + filepath.Dir(kubeconfig), "KUBECONFIG=" + kubeconfig}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	g.Expect(errors.As(err, &exit)).To(BeTrue(), "the manager must exit with an error: %v\n%s", err, out)
	g.Expect(exit.ExitCode()).To(Equal(1), "%s", out)
	return out
}

// unusedKubeconfig writes a kubeconfig for an API server nobody listens on (port 1): enough for a manager
// to build its clients, which connect lazily.
func unusedKubeconfig(t *testing.T) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["none"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
	kc.AuthInfos["none"] = &clientcmdapi.AuthInfo{Token: "unused"}
	kc.Contexts["none"] = &clientcmdapi.Context{Cluster: "none", AuthInfo: "none"}
	kc.CurrentContext = "none"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// --logging-format=json: the control-plane manager, run as its own process against a real API server,
// writes every line as a JSON object, and a reconcile's line names the objects the way CAPI's managers
// do — kinds as keys, objects as {"name", "namespace"}.
func TestJSONLogsNameObjectsLikeCAPI(t *testing.T) {
	g := NewWithT(t)
	bin := filepath.Join(managerBinaries(t), "controlplane")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	env, err := envtest.Start(ctx, envtest.Options{
		CRDDirectoryPaths:      []string{"controlplane/config/crd/bases"},
		AddToScheme:            []func(*runtime.Scheme) error{controlplanev1.AddToScheme},
		WithoutCAPIControllers: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	// The control plane attaches the API server it runs against: the manager's own admin kubeconfig.
	kc := clientcmdapi.NewConfig()
	kc.Clusters["env"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["env"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData}
	kc.Contexts["env"] = &clientcmdapi.Context{Cluster: "env", AuthInfo: "env"}
	kc.CurrentContext = "env"
	kubeconfig, err := clientcmd.Write(*kc)
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600)).To(Succeed())
	certDir := webhookCertificate(g, dir)

	ns := env.CreateNamespace(ctx, t, "logs").Name
	const filter = "json-logs"
	labels := map[string]string{clusterv1.WatchLabel: filter}
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "self-admin"}, Data: map[string][]byte{"value": kubeconfig}})).To(Succeed())
	cp := &controlplanev1.YonderControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "self", Labels: labels},
		Spec: controlplanev1.YonderControlPlaneSpec{KubeconfigSecretRef: controlplanev1.KubeconfigSecretReference{Name: "self-admin", Key: "value"}}}
	g.Expect(env.Create(ctx, cp)).To(Succeed())
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "selfcluster", Labels: labels},
		Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group, Kind: "YonderControlPlane", Name: cp.Name}}}
	g.Expect(env.Create(ctx, cluster)).To(Succeed())
	// What CAPI's Cluster controller does (it does not run here): the Cluster owns its control plane.
	p := client.MergeFrom(cp.DeepCopy())
	cp.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: cluster.Name, UID: cluster.UID, Controller: ptr.To(true)}}
	g.Expect(env.Patch(ctx, cp, p)).To(Succeed())

	stderr := filepath.Join(dir, "stderr")
	logFile, err := os.Create(stderr)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = logFile.Close() })
	cmd := exec.CommandContext(ctx, bin, "--logging-format=json", "--leader-elect=false", "--metrics-bind-addr=0", "--health-addr=0",
		"--webhook-port="+strconv.Itoa(freePort(g)), "--webhook-cert-dir="+certDir, "--watch-filter="+filter, "--namespace="+ns)
	cmd.Env = []string{"HOME=" + dir, "KUBECONFIG=" + filepath.Join(dir, "kubeconfig")}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })

	wantObject := func(name string) map[string]any { return map[string]any{"name": name, "namespace": ns} }
	g.Eventually(func(g Gomega) {
		var found bool
		for _, line := range jsonLines(g, stderr) {
			if line["msg"] == "Marking the attached control plane initialized" {
				found = true
				g.Expect(line).To(HaveKeyWithValue("Cluster", wantObject(cluster.Name)))
				g.Expect(line).To(HaveKeyWithValue("YonderControlPlane", wantObject(cp.Name)))
				g.Expect(line).To(HaveKeyWithValue("controller", "yondercontrolplane"))
				g.Expect(line).To(HaveKeyWithValue("v", BeEquivalentTo(0)))
			}
		}
		g.Expect(found).To(BeTrue(), "the reconcile's line")
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	// A line that was a log line in text format would fail jsonLines above; the manager's own start is
	// JSON too.
	g.Expect(jsonLines(g, stderr)).To(ContainElement(HaveKeyWithValue("msg", "Starting manager")))
}

// onlyJSONLine parses out, a manager's output of one line, as a JSON object.
func onlyJSONLine(out string) (map[string]any, error) {
	line := map[string]any{}
	return line, json.Unmarshal([]byte(out), &line)
}

// jsonLines parses every line of the log at path as a JSON object with a message; one that is not fails g.
func jsonLines(g Gomega, path string) []map[string]any {
	raw, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	return parseJSONLines(g, raw)
}

// parseJSONLines parses every line of raw as a JSON object with a message; one that is not fails g.
func parseJSONLines(g Gomega, raw []byte) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := map[string]any{}
		g.Expect(json.Unmarshal(sc.Bytes(), &line)).To(Succeed(), "not a JSON line: %s", sc.Text())
		g.Expect(line).To(HaveKey("msg"), sc.Text())
		out = append(out, line)
	}
	g.Expect(sc.Err()).NotTo(HaveOccurred())
	return out
}

// webhookCertificate writes the webhook server's tls.crt and tls.key below dir (cert-manager's job in a
// cluster) and returns their directory.
func webhookCertificate(g Gomega, dir string) string {
	ca, err := testpki.NewCA("logs-test-webhook-ca", time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	certPEM, keyPEM, err := ca.Issue(testpki.Leaf{CommonName: "localhost", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	g.Expect(err).NotTo(HaveOccurred())
	certDir := filepath.Join(dir, "certs")
	g.Expect(os.MkdirAll(certDir, 0o700)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(certDir, "tls.crt"), certPEM, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(certDir, "tls.key"), keyPEM, 0o600)).To(Succeed())
	return certDir
}

func freePort(g Gomega) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
