package stack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/testbins"
)

// PauseImage is the sandbox image name the node's containerd config uses; BusyboxImage a workload image.
const (
	PauseImage   = "registry.k8s.io/pause:3.10"
	BusyboxImage = "yonder.test/busybox:1"
)

// WorkloadKubeconfigSecret is the management Secret (in HostNamespace, key "value") holding the workload
// cluster's admin kubeconfig: what a YonderControlPlane's kubeconfigSecretRef names.
const WorkloadKubeconfigSecret = "workload-admin-kubeconfig"

type artifact struct {
	path, sha256 string
}

// serveArtifacts publishes the node bundle over HTTP on the bridge address: hosts download it as they
// would from a mirror.
func (s *Stack) serveArtifacts() error {
	s.artifacts = map[string]artifact{}
	add := func(name, p string) error {
		f, err := os.Open(p) //nolint:gosec // paths of the artifacts the stack built or found in the test cache
		if err != nil {
			return fmt.Errorf("failed to open artifact %s: %w", name, err)
		}
		defer func() { _ = f.Close() }()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return fmt.Errorf("failed to hash artifact %s: %w", name, err)
		}
		s.artifacts[name] = artifact{path: p, sha256: hex.EncodeToString(h.Sum(nil))}
		return nil
	}
	if err := add("yonder-agent", filepath.Join(s.binDir, "yonder-agent")); err != nil {
		return err
	}
	for _, b := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr"} {
		p, err := testbins.Path(b)
		if err != nil {
			return err
		}
		if err := add(b, p); err != nil {
			return err
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("failed to read busybox-static (run hack/test-bins.sh --packages): %w", err)
	}
	for name, img := range map[string]struct {
		ref  string
		spec ociimage.Image
	}{
		"image/pause": {PauseImage, ociimage.Pause(bb)},
		"image/busybox": {BusyboxImage, ociimage.Image{Files: ociimage.Busybox(bb, "sh", "sleep", "echo", "cat", "ls", "hostname", "wget", "ip",
			// The lab's cross-site pod check: an HTTP server and client, ping, nc.
			"httpd", "ping", "nc", "mkdir", "timeout"),
			Cmd: []string{"/bin/sh"}}},
	} {
		p := filepath.Join(s.binDir, strings.ReplaceAll(name, "/", "-")+".oci.tar")
		if err := ociimage.WriteArchiveFile(p, img.ref, img.spec); err != nil {
			return err
		}
		if err := add(name, p); err != nil {
			return err
		}
	}
	for _, name := range sortedKeys(s.opts.ExtraImages) {
		if err := add("image/"+name, s.opts.ExtraImages[name]); err != nil {
			return err
		}
	}
	rootfs, err := rootfsArchive()
	if err != nil {
		return err
	}
	if err := add("rootfs", rootfs); err != nil {
		return err
	}

	l, err := net.Listen("tcp", net.JoinHostPort(s.Net.Gateway.String(), "0"))
	if err != nil {
		return fmt.Errorf("failed to listen for the artifact server: %w", err)
	}
	s.ArtifactURL = "http://" + l.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a, ok := s.artifacts[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, a.path)
	})
	s.httpServer = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.httpServer.Serve(l) }()
	return nil
}

// rootfsArchive returns the cached node rootfs (hack/test-bins.sh --rootfs builds it once).
func rootfsArchive() (string, error) {
	if p := os.Getenv("YONDER_TEST_ROOTFS"); p != "" {
		return p, nil
	}
	cmd := exec.Command("bash", filepath.Join(testbins.RepoRoot(), "hack", "test-bins.sh"), "--rootfs")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("failed to build the node rootfs (hack/test-bins.sh --rootfs): %s: %w", stderr.String(), err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}

// NodeArtifacts returns what a YonderConfig(Template) needs for an offline node served by this stack:
// the rootfs archive and the binaries and images, each by URL and sha256.
func (s *Stack) NodeArtifacts() (bootstrapv1.Rootfs, []bootstrapv1.Artifact) {
	var arts []bootstrapv1.Artifact
	for _, name := range sortedKeys(s.artifacts) {
		if name == "rootfs" || name == "yonder-agent" {
			continue
		}
		a := s.artifacts[name]
		arts = append(arts, bootstrapv1.Artifact{Name: name, Source: bootstrapv1.Source{URL: s.ArtifactURL + "/" + name, SHA256: a.sha256}})
	}
	r := s.artifacts["rootfs"]
	return bootstrapv1.Rootfs{Archive: &bootstrapv1.Source{URL: s.ArtifactURL + "/rootfs", SHA256: r.sha256}}, arts
}

// startWorkload starts the workload control plane with the join RBAC a kubeadm cluster has, and stores
// its admin kubeconfig as WorkloadKubeconfigSecret.
func (s *Stack) startWorkload(ctx context.Context) error {
	var err error
	s.Workload, err = controlplane.Start(ctx, controlplane.Options{
		Name: "workload", BindAddress: s.Net.Gateway, Dir: filepath.Join(s.Dir, "workload"),
		WithControllerManager: true, WithScheduler: true, FastNodeMonitoring: s.opts.FastNodeMonitoring,
		ExtraControllerManagerArgs: map[string]string{"allocate-node-cidrs": "true", "cluster-cidr": PodCIDR, "node-cidr-mask-size": "24"},
		// Without kube-proxy on the host, a webhook Service's ClusterIP leads nowhere; the apiserver dials the
		// Service's endpoints instead (a hostNetwork webhook such as yonder-net-controller's: its Node address).
		ExtraAPIServerArgs: map[string]string{"enable-aggregator-routing": "true"},
	})
	if err != nil {
		return fmt.Errorf("failed to start the workload control plane: %w", err)
	}
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	if s.WorkloadClient, err = client.New(s.Workload.Config, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("failed to create the workload client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.HostNamespace}}
	if err := s.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create namespace %s: %w", s.HostNamespace, err)
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: WorkloadKubeconfigSecret, Namespace: s.HostNamespace},
		Data:       map[string][]byte{"value": s.Workload.AdminKubeconfig},
	}
	if err := s.Client.Create(ctx, sec); err != nil {
		return fmt.Errorf("failed to store the workload kubeconfig: %w", err)
	}
	return nil
}

// startHosts starts every site's hosts (sharing one client key) and registers them as YonderSSHHosts
// with pinned host keys, in the site's failure domain.
func (s *Stack) startHosts(ctx context.Context) error {
	keyPEM, _, err := hosts.NewClientKey()
	if err != nil {
		return fmt.Errorf("failed to create the hosts' client key: %w", err)
	}
	cred := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "yonder-hosts-ssh", Namespace: s.HostNamespace},
		Data:       map[string][]byte{"ssh-privatekey": keyPEM},
	}
	if err := s.Client.Create(ctx, cred); err != nil {
		return fmt.Errorf("failed to store the hosts' SSH credentials: %w", err)
	}
	for _, site := range s.opts.Sites {
		if site.Hosts == 0 {
			continue
		}
		hs, err := hosts.Start(ctx, s.Net, site.Name, site.Hosts, hosts.Options{ClientKeyPEM: keyPEM, PrivateDirs: HostPrivateDirs})
		if err != nil {
			return fmt.Errorf("failed to start the hosts of site %s: %w", site.Name, err)
		}
		s.Hosts[site.Name] = hs
		for _, h := range hs {
			obj := &infrav1.YonderSSHHost{
				ObjectMeta: metav1.ObjectMeta{Name: h.Name, Namespace: s.HostNamespace, Labels: map[string]string{"yonder.dev/site": site.Name}},
				Spec: infrav1.YonderSSHHostSpec{
					SSHEndpoint: infrav1.SSHEndpoint{
						Address: h.Address.String(), Port: int32(h.Port), User: h.User, //nolint:gosec // a TCP port
						CredentialsSecretRef: infrav1.SecretReference{Name: cred.Name},
						HostKey:              strings.TrimSpace(string(sshAuthorizedKey(h))),
					},
					FailureDomain: site.Name,
				},
			}
			if err := s.Client.Create(ctx, obj); err != nil {
				return fmt.Errorf("failed to register host %s: %w", h.Name, err)
			}
		}
	}
	return nil
}

// WaitFor polls cond every second until it returns true, an error, or timeout passes.
func WaitFor(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, cond)
}

// sshAuthorizedKey is a host's public host key in authorized_keys form (what YonderSSHHost pins).
func sshAuthorizedKey(h *hosts.Host) []byte { return ssh.MarshalAuthorizedKey(h.HostKey) }
