package agent

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/yonder-dev/yonder/hostruntime/internal/render"
)

// join waits for the kubelet's TLS bootstrap, the Node, its pod CIDR (then writes the CNI config) and
// Readiness.
func (r *run) join(ctx context.Context) (string, error) {
	root := r.o.rootfsDir()
	ctx, cancel := context.WithTimeout(ctx, r.o.ReadyTimeout)
	defer cancel()
	kubeletLog := filepath.Join(root, render.LogDir, "kubelet.log")
	hint := "see the kubelet log " + kubeletLog + " and " + filepath.Join(root, render.LogDir, "containerd.log")
	if err := waitFor(ctx, 50*time.Millisecond, func() (bool, error) { return fileExists(inRoot(root, render.KubeletClientCert)), nil }); err != nil {
		return "", withHint(fmt.Errorf("the kubelet did not obtain a client certificate (TLS bootstrap) within %s: %s", r.o.ReadyTimeout, tail(readFile(kubeletLog))),
			"check the bootstrap token is valid and the cluster auto-approves node client CSRs (system:bootstrappers → nodeclient); "+hint)
	}
	cs, err := kubeletClient(r.cfg.APIServer.Endpoint, r.cfg.APIServer.CACertificate, root)
	if err != nil {
		return "", err
	}
	var node *corev1.Node
	cniWritten := r.o.PodCIDR != ""
	err = waitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not registered yet
		}
		node = n
		if !cniWritten && n.Spec.PodCIDR != "" {
			w := &writer{root: root}
			w.file(render.CNIConfFile, render.CNIConflist(n.Spec.PodCIDR), 0o644)
			if w.err != nil {
				return false, w.err
			}
			cniWritten = true
			r.log.Info("Wrote CNI config for the Node's pod CIDR", "podCIDR", n.Spec.PodCIDR)
		}
		return nodeReady(n, r.launched), nil
	})
	if err != nil {
		switch {
		case node == nil:
			return "", withHint(fmt.Errorf("node %s was not registered within %s", r.cfg.NodeName, r.o.ReadyTimeout), hint)
		case !cniWritten:
			return "", withHint(fmt.Errorf("node %s has no spec.podCIDR, so no CNI config was written", r.cfg.NodeName),
				"enable --allocate-node-cidrs on kube-controller-manager, or pass --pod-cidr to yonder-agent")
		default:
			return "", withHint(fmt.Errorf("node %s did not become Ready within %s: %s", r.cfg.NodeName, r.o.ReadyTimeout, readyMessage(node)), hint)
		}
	}
	r.log.Info("Node is Ready", "node", node.Name, "providerID", node.Spec.ProviderID)
	return "", nil
}

// localAddressTo returns this host's source address towards the API server (what the kubelet would
// pick, made explicit so multi-homed hosts register the address the control plane reaches), or "".
func localAddressTo(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	c, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port)) // no packet is sent
	if err != nil {
		return ""
	}
	defer func() { _ = c.Close() }()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return a.IP.String()
	}
	return ""
}

// inRoot resolves path inside the machine's tree: kubelet-client-current.pem is a symlink with an
// absolute target that means the machine's /var/lib/kubelet, not the host's.
func inRoot(root, path string) string {
	p := path
	for range 8 {
		full := filepath.Join(root, p)
		target, err := os.Readlink(full)
		if err != nil {
			return full
		}
		if filepath.IsAbs(target) {
			p = target
		} else {
			p = filepath.Join(filepath.Dir(p), target)
		}
	}
	return filepath.Join(root, p)
}

// kubeletClient is a client with the kubelet's own (TLS-bootstrapped) identity.
func kubeletClient(endpoint, ca, root string) (*kubernetes.Clientset, error) {
	pem, err := os.ReadFile(inRoot(root, render.KubeletClientCert))
	if err != nil {
		return nil, fmt.Errorf("failed to read the kubelet's client certificate: %w", err)
	}
	return kubernetes.NewForConfig(&rest.Config{
		Host:            endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(ca), CertData: pem, KeyData: pem},
		Timeout:         10 * time.Second,
	})
}

// nodeReady reports whether the Node is Ready, and when the machine was (re)started at launched, Ready
// from a heartbeat of the kubelet started then. After a reboot the Node still shows the Ready of the
// kubelet that ran before it until the node controller's grace period (40-50 s) ends, and a converge
// that trusted it would call the node back while its kubelet has not started.
func nodeReady(n *corev1.Node, launched time.Time) bool {
	cutoff := metav1.NewTime(launched.Add(-time.Second).Truncate(time.Second)) // heartbeats have seconds
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return launched.IsZero() || !c.LastHeartbeatTime.Before(&cutoff)
		}
	}
	return false
}

func readyMessage(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Reason + ": " + c.Message
		}
	}
	return "no Ready condition yet"
}

func (r *run) sentinel(ctx context.Context) (string, error) {
	if prev := r.st.Phases[PhaseSentinel]; prev == nil || prev.Inputs != "post-done" {
		for i, c := range r.cfg.PostCommands {
			out, err := exec.CommandContext(ctx, "/bin/sh", "-c", c).CombinedOutput()
			if err != nil {
				return "", withHint(fmt.Errorf("postCommands[%d] failed: %s: %w", i, tail(out), err), "fix the command; it runs again on the next bootstrap")
			}
		}
	}
	if !fileExists(r.o.SentinelPath) {
		if err := os.MkdirAll(filepath.Dir(r.o.SentinelPath), 0o755); err != nil { //nolint:gosec // /run/cluster-api is read by the provider
			return "", err
		}
		if err := os.WriteFile(r.o.SentinelPath, []byte("success\n"), 0o644); err != nil { //nolint:gosec // a public marker
			return "", withHint(err, "the infrastructure provider waits for this file")
		}
	}
	r.st.Sentinel = r.o.SentinelPath
	return "post-done", nil
}

func waitFor(ctx context.Context, every time.Duration, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}
