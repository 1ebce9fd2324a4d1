package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
	"github.com/yonder-dev/yonder/pkg/hostprep"
)

// A bundle file whose content does not match its pinned sha256 is rejected before anything on the host
// changes: no sysctl, no rootfs, no machine.
func TestCorruptedArtifactIsRejectedBeforeUse(t *testing.T) {
	g := NewWithT(t)
	before, _ := hostOwnSysctls(t)
	arts, root := nodeBundle(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "kubelet")
	g.Expect(os.WriteFile(bad, []byte("not the kubelet"), 0o755)).To(Succeed())
	var corrupted []agentv1.Artifact
	for _, a := range arts {
		if a.Name == "kubelet" {
			a.Path = bad // the pinned digest stays the real kubelet's
		}
		corrupted = append(corrupted, a)
	}
	cfg := &agentv1.AgentConfig{
		APIVersion: agentv1.APIVersion, Kind: agentv1.Kind, NodeName: "corrupt", KubernetesVersion: "v1.36.3",
		APIServer:      agentv1.APIServer{Endpoint: "https://127.0.0.1:6443", CACertificate: selfSignedCA(t)},
		BootstrapToken: "abcdef.0123456789abcdef", Rootfs: agentv1.Rootfs{Archive: root}, Artifacts: corrupted,
	}
	data, err := agentv1.Encode(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	cfgPath := filepath.Join(dir, "agent-config.yaml")
	g.Expect(os.WriteFile(cfgPath, data, 0o600)).To(Succeed())
	stateDir := filepath.Join(dir, "state")
	cmd := exec.Command(agentBinary(t), "bootstrap", "--config", cfgPath, "--state-dir", stateDir,
		"--machine-name", "yonder-corrupt-test", "--sentinel", filepath.Join(dir, "sentinel"))
	out, err := cmd.CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("phase artifacts failed"))
	g.Expect(string(out)).To(ContainSubstring(`artifact "kubelet" from ` + bad + " has sha256"))
	g.Expect(string(out)).To(ContainSubstring("what to do:"))
	g.Expect(filepath.Join(stateDir, "machines")).NotTo(BeAnExistingFile(), "nothing may be installed")
	after, _ := hostOwnSysctls(t)
	g.Expect(after).To(Equal(before), "the host must not be changed")
	st, err := state.Store{Dir: stateDir}.Load()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phases[PhaseArtifacts()].Result).To(Equal(state.Failed))
	g.Expect(st.Phases).NotTo(HaveKey("host"))
}

func selfSignedCA(t testing.TB) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// PhaseArtifacts keeps the test readable without importing the agent package twice.
func PhaseArtifacts() string { return "artifacts" }

// Two nodes on one machine (two network-namespace hosts, two machines, two cgroup subtrees) run side by
// side; resetting one leaves the other and its pod untouched.
func TestTwoNodesSideBySide(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	before, _ := hostOwnSysctls(t)
	c := startCluster(t)
	nodes := []*node{c.newNode(t, "b"), c.newNode(t, "c")}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	outs := make([]string, len(nodes))
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, stderr, err := nd.agent(ctx, "bootstrap", "--ready-timeout=3m")
			errs[i], outs[i] = err, stderr
		}()
	}
	wg.Wait()
	for i := range nodes {
		g.Expect(errs[i]).NotTo(HaveOccurred(), "bootstrap of %s: %s", nodes[i].name, outs[i])
	}
	for _, nd := range nodes {
		_, err := c.admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "sleep-" + nd.name, Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName: nd.name, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "c", Image: busyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}},
			},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	running := func(name string) func() corev1.PodPhase {
		return func() corev1.PodPhase {
			p, err := c.admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return ""
			}
			return p.Status.Phase
		}
	}
	for _, nd := range nodes {
		g.Eventually(running("sleep-"+nd.name), 60*time.Second, 200*time.Millisecond).Should(Equal(corev1.PodRunning))
	}
	b, cc := nodes[0], nodes[1]
	pc, err := c.admin.CoreV1().Pods("default").Get(ctx, "sleep-"+cc.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	_, stderr, err := b.agent(ctx, "reset")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(status(t, cc).Machine.Running).To(BeTrue())
	// The other node stays Ready and its pod keeps running, never restarted.
	g.Consistently(func(g Gomega) {
		p, err := c.admin.CoreV1().Pods("default").Get(ctx, "sleep-"+cc.name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.UID).To(Equal(pc.UID))
		g.Expect(p.Status.ContainerStatuses[0].RestartCount).To(BeZero())
		n, err := c.admin.CoreV1().Nodes().Get(ctx, cc.name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ready(n)).To(BeTrue())
	}, 5*time.Second, 500*time.Millisecond).Should(Succeed())
	// Host-global sysctls stay as the running node needs them; the last reset restores the originals.
	g.Expect(hostSysctls(t)).To(Equal(hostprep.KubeletSysctls))
	_, stderr, err = cc.agent(ctx, "reset")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	expectNothingLeft(t, cc, before)
}

// Killing the agent in the middle of a phase (here: while it extracts the rootfs) and running it again
// converges to a Ready Node.
func TestKilledMidPhaseRerunConverges(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := startCluster(t)
	nd := c.newNode(t, "k")

	args := append([]string{"--net=" + nd.host.NamespacePath, "--", nd.bin, "bootstrap"}, strings.Fields(nd.flags())...)
	cmd := exec.Command("nsenter", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // kill the agent and its children (tar) like a crash of the unit
	g.Expect(cmd.Start()).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	g.Eventually(func() string {
		data, _ := os.ReadFile(filepath.Join(nd.stateDir, state.FileName))
		st := &state.State{}
		_ = json.Unmarshal(data, st)
		if r := st.Phases["rootfs"]; r != nil {
			return r.Result
		}
		return ""
	}, 60*time.Second, 10*time.Millisecond).Should(Equal(state.Started))
	g.Expect(syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)).To(Succeed())
	g.Eventually(done, 10*time.Second).Should(Receive())
	t.Logf("killed the agent during the rootfs phase:\n%s", out.String())

	stdout, stderr, err := nd.agent(ctx, "bootstrap", "--ready-timeout=2m")
	g.Expect(err).NotTo(HaveOccurred(), "re-run: %s\n%s", stdout, stderr)
	g.Expect(stderr).To(ContainSubstring("Resuming interrupted phase"))
	n, err := c.admin.CoreV1().Nodes().Get(ctx, nd.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ready(n)).To(BeTrue())
	g.Expect(filepath.Join(nd.stateDir, "machines", nd.machine+".partial")).NotTo(BeAnExistingFile())
	g.Expect(fmt.Sprint(status(t, nd).Phases["rootfs"].Result)).To(Equal(state.Succeeded))
}

// The production path: the infrastructure provider runs `yonder-agent bootstrap` over SSH. The machine
// outlives the SSH session (it is launched detached, in its own session and cgroup subtree).
func TestBootstrapOverSSHOutlivesTheSession(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := startCluster(t)
	nd := c.newNode(t, "s")
	cmd := fmt.Sprintf("%s bootstrap %s --ready-timeout=2m", nd.bin, nd.flags())
	stdout, stderr, err := nd.host.Run(ctx, cmd)
	g.Expect(err).NotTo(HaveOccurred(), "bootstrap over SSH: %s\n%s", stdout, stderr)
	g.Expect(status(t, nd).Machine.Running).To(BeTrue())
	g.Consistently(func(g Gomega) {
		n, err := c.admin.CoreV1().Nodes().Get(ctx, nd.name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ready(n)).To(BeTrue())
	}, 3*time.Second, 500*time.Millisecond).Should(Succeed())
}

// upgrade switches blue/green to a new configuration and verifies the new kubelet; a new configuration
// whose kubelet does not come up is rolled back, and the node keeps running the previous one. Reset
// removes both machines.
func TestUpgradeSwitchesMachinesAndRollsBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	before, _ := hostOwnSysctls(t)
	c := startCluster(t)
	nd := c.newNode(t, "u")
	_, stderr, err := nd.agent(ctx, "bootstrap", "--ready-timeout=2m")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	first := status(t, nd).Machine.Name

	rewrite := func(mutate func(*agentv1.AgentConfig)) {
		data, err := os.ReadFile(nd.config)
		g.Expect(err).NotTo(HaveOccurred())
		cfg, err := agentv1.Decode(data)
		g.Expect(err).NotTo(HaveOccurred())
		mutate(cfg)
		data, err = agentv1.Encode(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(nd.config, data, 0o600)).To(Succeed())
	}
	maxPods := func() string {
		n, err := c.admin.CoreV1().Nodes().Get(ctx, nd.name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		q := n.Status.Capacity[corev1.ResourcePods]
		return q.String()
	}
	rewrite(func(cfg *agentv1.AgentConfig) {
		cfg.KubeletExtraArgs = []agentv1.Arg{{Name: "max-pods", Value: "33"}}
	})
	_, stderr, err = nd.agent(ctx, "upgrade", "--ready-timeout=2m")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	s := status(t, nd)
	g.Expect(s.Machine.Name).NotTo(Equal(first))
	g.Expect(s.Machine.Running).To(BeTrue())
	g.Eventually(maxPods, 30*time.Second, 200*time.Millisecond).Should(Equal("33"))
	upgraded := s.Machine.Name

	// A kubelet that does not start: rolled back.
	broken := filepath.Join(nd.host.Dir, "broken-kubelet")
	g.Expect(os.WriteFile(broken, []byte("#!/bin/sh\necho broken >&2\nexit 1\n"), 0o755)).To(Succeed())
	rewrite(func(cfg *agentv1.AgentConfig) {
		cfg.KubeletExtraArgs = []agentv1.Arg{{Name: "max-pods", Value: "44"}}
		for i := range cfg.Artifacts {
			if cfg.Artifacts[i].Name == "kubelet" {
				cfg.Artifacts[i].Path, cfg.Artifacts[i].SHA256 = broken, sha(t, broken)
			}
		}
	})
	_, stderr, err = nd.agent(ctx, "upgrade", "--ready-timeout=20s")
	g.Expect(err).To(HaveOccurred())
	g.Expect(stderr).To(ContainSubstring("rolled back to " + upgraded))
	s = status(t, nd)
	g.Expect(s.Machine.Name).To(Equal(upgraded))
	g.Expect(s.Machine.Running).To(BeTrue())
	g.Expect(s.Phases["upgrade"].Result).To(Equal(state.Failed))
	n, err := c.admin.CoreV1().Nodes().Get(ctx, nd.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ready(n)).To(BeTrue())
	g.Expect(maxPods()).To(Equal("33"))

	_, stderr, err = nd.agent(ctx, "reset")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	expectNothingLeft(t, nd, before)
	g.Expect(nspawnRunning(upgraded)).To(BeFalse())
	g.Expect(nspawnRunning(first)).To(BeFalse())
}
