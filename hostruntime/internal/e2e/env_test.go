package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/gobuild"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/testbins"
)

const (
	pauseImage   = "registry.k8s.io/pause:3.10"
	busyboxImage = "yonder.test/busybox:1"
	podCIDR      = "10.244.0.0/16"
)

// TestMain removes what the package-level helpers built once (agent binary, bundle) after all tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if agentBin != "" {
		_ = os.RemoveAll(filepath.Dir(agentBin))
	}
	if bundleDir != "" {
		_ = os.RemoveAll(bundleDir)
	}
	os.Exit(code)
}

var (
	agentOnce sync.Once
	agentBin  string
	agentErr  error
)

// agentBinary builds yonder-agent once per test process.
func agentBinary(t testing.TB) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "yonder-agent-bin-")
		if err != nil {
			agentErr = err
			return
		}
		agentBin = filepath.Join(dir, "yonder-agent")
		agentErr = gobuild.Build(context.Background(), agentBin, gobuild.Options{Static: true}, "./hostruntime/cmd/yonder-agent")
	})
	if agentErr != nil {
		t.Fatalf("cannot build yonder-agent: %v", agentErr)
	}
	return agentBin
}

// rootfsArchive returns the cached node rootfs (building it once with hack/test-bins.sh --rootfs).
func rootfsArchive(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("YONDER_TEST_ROOTFS"); p != "" {
		return p
	}
	p, err := testbins.Artifact("--rootfs")
	if err != nil {
		t.Fatalf("cannot build the node rootfs: %v", err)
	}
	return p
}

func sha(t testing.TB, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

var (
	bundleOnce sync.Once
	bundle     []agentv1.Artifact
	bundleRoot *agentv1.Artifact
	bundleDir  string
)

// nodeBundle is the offline bundle: cached binaries, the rootfs archive and two OCI image archives (the
// pause image, named exactly as the CRI config names it, and a busybox workload image).
func nodeBundle(t testing.TB) ([]agentv1.Artifact, *agentv1.Artifact) {
	t.Helper()
	bundleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "yonder-bundle-")
		if err != nil {
			t.Fatal(err)
		}
		bundleDir = dir
		for _, b := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr"} {
			p, err := testbins.Path(b)
			if err != nil {
				t.Fatal(err)
			}
			bundle = append(bundle, agentv1.Artifact{Name: b, Path: p, SHA256: sha(t, p)})
		}
		bb, err := os.ReadFile("/bin/busybox")
		if err != nil {
			t.Fatalf("busybox-static is missing: run `hack/test-bins.sh --packages`: %v", err)
		}
		images := map[string]struct {
			name string
			spec ociimage.Image
		}{
			"pause":   {pauseImage, ociimage.Pause(bb)},
			"busybox": {busyboxImage, ociimage.Image{Files: ociimage.Busybox(bb, "sh", "sleep", "echo", "cat", "ls", "hostname", "wget", "ip"), Cmd: []string{"/bin/sh"}}},
		}
		for name, img := range images {
			p := filepath.Join(dir, name+".oci.tar")
			if err := ociimage.WriteArchiveFile(p, img.name, img.spec); err != nil {
				t.Fatal(err)
			}
			bundle = append(bundle, agentv1.Artifact{Name: "image/" + name, Path: p, SHA256: sha(t, p)})
		}
		r := rootfsArchive(t)
		bundleRoot = &agentv1.Artifact{Name: "rootfs", Path: r, SHA256: sha(t, r)}
	})
	return bundle, bundleRoot
}

// cluster is a workload control plane on a lab network, with the join RBAC a bootstrap provider installs.
type cluster struct {
	net   *labnet.Network
	cp    *controlplane.ControlPlane
	admin *kubernetes.Clientset
}

func startCluster(t testing.TB) *cluster {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	cp, err := controlplane.Start(ctx, controlplane.Options{
		BindAddress: n.Gateway, WithControllerManager: true, WithScheduler: true,
		ExtraControllerManagerArgs: map[string]string{"allocate-node-cidrs": "true", "cluster-cidr": podCIDR, "node-cidr-mask-size": "24"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	admin, err := kubernetes.NewForConfig(cp.Config)
	g.Expect(err).NotTo(HaveOccurred())
	for name, b := range map[string][2]string{
		"yonder:kubelet-bootstrap":                   {"Group/system:bootstrappers", "system:node-bootstrapper"},
		"yonder:node-autoapprove-bootstrap":          {"Group/system:bootstrappers", "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
		"yonder:node-autoapprove-certificate-rotate": {"Group/system:nodes", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
	} {
		subj := strings.SplitN(b[0], "/", 2)
		_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: b[1]},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: subj[0], Name: subj[1]}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	return &cluster{net: n, cp: cp, admin: admin}
}

// token creates a bootstrap token and returns it.
func (c *cluster) token(t testing.TB, id string) string {
	t.Helper()
	secret := "0123456789" + id
	_, err := c.admin.CoreV1().Secrets("kube-system").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": id, "token-secret": secret,
			"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
			"expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return id + "." + secret
}

// node is one host running yonder-agent.
type node struct {
	host     *hosts.Host
	name     string
	machine  string
	stateDir string
	sentinel string
	config   string
	bin      string
	// configData is the AgentConfig the bootstrap data writes to config.
	configData []byte
}

// newNode starts a host and writes its AgentConfig.
func (c *cluster) newNode(t testing.TB, suffix string) *node {
	t.Helper()
	return c.nodeOn(t, c.newHost(t, suffix), suffix)
}

// newHost starts a host for a node on the cluster's network.
func (c *cluster) newHost(t testing.TB, suffix string) *hosts.Host {
	t.Helper()
	return startHost(t, c.net, "ag"+suffix)
}

// startHost starts a host on n: a network namespace and a directory whose etc/ and run/ stand for the
// host's /etc and /run, which exist before any bootstrap.
func startHost(t testing.TB, n *labnet.Network, prefix string) *hosts.Host {
	t.Helper()
	h := hosts.StartForTest(t, n, prefix, 1)[0]
	for _, d := range []string{"etc", "run"} {
		if err := os.Mkdir(filepath.Join(h.Dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// nodeOn makes h the Node node-<slot>-<suffix>: it writes the node's AgentConfig where the bootstrap data
// writes it (etc/yonder/agent-config.yaml below the host's directory), with a bootstrap token of its own.
// A host that was another Node before (reset since) is a reused host: same state directory and sentinel,
// new node name, machine, token and config.
func (c *cluster) nodeOn(t testing.TB, h *hosts.Host, suffix string) *node {
	t.Helper()
	g := NewWithT(t)
	arts, root := nodeBundle(t)
	nd := &node{
		host:     h,
		name:     fmt.Sprintf("node-%d-%s", c.net.Slot, suffix),
		machine:  fmt.Sprintf("yonder-t%d-%s", c.net.Slot, suffix),
		stateDir: filepath.Join(h.Dir, "state"),
		sentinel: filepath.Join(h.Dir, "run", "cluster-api", "bootstrap-success.complete"),
		config:   filepath.Join(h.Dir, "etc", "yonder", "agent-config.yaml"),
		bin:      agentBinary(t),
	}
	cfg := &agentv1.AgentConfig{
		APIVersion: agentv1.APIVersion, Kind: agentv1.Kind,
		NodeName:          nd.name,
		ProviderID:        "yonder-ssh://default/" + nd.name,
		KubernetesVersion: "v1.36.3",
		APIServer:         agentv1.APIServer{Endpoint: c.cp.Endpoint, CACertificate: string(c.cp.CACertPEM)},
		BootstrapToken:    c.token(t, (strings.ToLower(suffix) + "tok000")[:6]),
		Labels:            map[string]string{"yonder.dev/site": "lab", "example.com/node": suffix},
		Rootfs:            agentv1.Rootfs{Archive: root},
		Artifacts:         arts,
	}
	data, err := agentv1.Encode(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	nd.configData = data
	nd.writeConfig(t)
	// Whatever a failed test leaves, the node is reset (machine, cgroups, sysctls) before the network goes.
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("YONDER_AGENT_TEST_SAVE_LOGS") != "" {
			nd.saveLogs(t)
		}
		if os.Getenv("YONDER_KEEP_TEST_DIRS") != "" {
			return
		}
		_, stderr, err := nd.agent(context.Background(), "reset")
		if err != nil {
			t.Logf("cleanup reset of %s: %v: %s", nd.name, err, stderr)
		}
	})
	return nd
}

// writeConfig writes the node's AgentConfig as the bootstrap data does before it runs the agent (reset
// removes it: it holds the spent bootstrap token).
func (nd *node) writeConfig(t testing.TB) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(nd.config), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nd.config, nd.configData, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (nd *node) flags() string {
	return fmt.Sprintf("--config %s --state-dir %s --machine-name %s --sentinel %s --provider-id-file %s", nd.config, nd.stateDir, nd.machine,
		nd.sentinel, filepath.Join(nd.host.Dir, "etc", "yonder", "provider-id"))
}

// agent runs `yonder-agent <sub> <flags>` in the host's network namespace, as its sshd would (nsenter
// --net, the way test/hosts starts sshd). Running it through the host's sshd works the same but costs a
// login shell per call.
func (nd *node) agent(ctx context.Context, sub string, extra ...string) (string, string, error) {
	args := append([]string{"--net=" + nd.host.NamespacePath, "--", nd.bin, sub}, strings.Fields(nd.flags())...)
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// saveLogs copies the node's logs (agent, machine, kubelet, containerd) out of its state directory before
// reset removes it, and says where.
func (nd *node) saveLogs(t testing.TB) {
	t.Helper()
	dir, err := os.MkdirTemp("", "yonder-agent-logs-"+nd.name+"-")
	if err != nil {
		return
	}
	for _, src := range []string{filepath.Join(nd.stateDir, "log"), filepath.Join(nd.stateDir, "machines", nd.machine, "var", "log", "yonder")} {
		_ = exec.Command("cp", "-r", src, dir).Run()
	}
	t.Logf("logs of %s saved in %s", nd.name, dir)
}
