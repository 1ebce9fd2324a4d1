package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	gcrname "github.com/google/go-containerregistry/pkg/name"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	"github.com/yonder-dev/yonder/test/registry"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/hosts"
)

// BusyboxImage is the test workload image; nodes pull it through the stack's registry (a mirror of
// yonder.test).
const BusyboxImage = "yonder.test/busybox:1"

// WorkloadKubeconfigSecret is the management Secret (in HostNamespace, key "value") holding the workload
// cluster's admin kubeconfig: what a YonderControlPlane's kubeconfigSecretRef names.
const WorkloadKubeconfigSecret = "workload-admin-kubeconfig"

// RegistryCASecret is the Secret (key ca.crt) with the stack registry's CA that the stack creates in
// HostNamespace, as an operator of a private registry does; templates name it in YONDER_REGISTRY_CA_SECRET.
const RegistryCASecret = "yonder-registry-ca"

// mirroredRegistries are the upstream registries whose images the stack's registry holds under the same
// paths (the lab's network add-on images, ghcr.io/yonder-dev/…; the test workload image, yonder.test/…;
// for ManageFromWorkload, CAPI's provider images, registry.k8s.io/cluster-api/…, and cert-manager's,
// quay.io/jetstack/…): nodes pull them through it, as an air-gapped site's nodes pull through their mirror.
var mirroredRegistries = []string{"ghcr.io", "quay.io", "registry.k8s.io", "yonder.test"}

// TemplateEnv is what a user sets for `clusterctl generate cluster` with the stack's registry: its CA
// Secret and the upstream registries it mirrors. (The image repository itself is clusterctl init's.)
func (s *Stack) TemplateEnv() []string {
	return []string{"YONDER_REGISTRY_CA_SECRET=" + RegistryCASecret,
		`YONDER_REGISTRY_MIRROR_OF=["` + strings.Join(mirroredRegistries, `","`) + `"]`}
}

// ImageRepository is where the stack's registry holds Yonder's images (clusterctl init's
// YONDER_IMAGE_REPOSITORY): the release's ghcr.io/yonder-dev, mirrored.
func (s *Stack) ImageRepository() string { return s.Registry.Host + "/yonder-dev" }

// startRegistry starts the stack's OCI registry on the bridge address and pushes what `make release-manifests`
// built (every image: managers, add-on, agent, node images), the caller's ExtraImages and the test workload
// image, each under its name's path (ghcr.io/yonder-dev/x → <registry>/yonder-dev/x).
func (s *Stack) startRegistry(ctx context.Context) error {
	t0 := time.Now()
	var err error
	if s.Registry, err = registry.Start(ctx, registry.Options{Address: s.Net.Gateway.String(), Dir: filepath.Join(s.Dir, "registry")}); err != nil {
		return fmt.Errorf("failed to start the registry: %w", err)
	}
	archives, err := filepath.Glob(filepath.Join(s.Dir, "release", "images", "*.oci.tar"))
	if err != nil || len(archives) == 0 {
		return fmt.Errorf("failed to find the release's images in %s (make release-manifests builds them)", filepath.Join(s.Dir, "release", "images"))
	}
	for _, name := range sortedKeys(s.opts.ExtraImages) {
		archives = append(archives, s.opts.ExtraImages[name])
	}
	busybox, err := s.busyboxArchive()
	if err != nil {
		return err
	}
	archives = append(archives, busybox)
	if s.opts.KubeProxy {
		kp, err := s.kubeProxyArchive()
		if err != nil {
			return err
		}
		archives = append(archives, kp)
	}
	for _, a := range archives {
		if err := s.pushArchive(ctx, a); err != nil {
			return err
		}
	}
	s.opts.Log("registry %s up with %d images in %s", s.Registry.Host, len(archives), time.Since(t0).Round(time.Millisecond))
	return nil
}

// pushArchive pushes the images of an image archive into the stack's registry.
func (s *Stack) pushArchive(ctx context.Context, path string) error {
	imgs, done, err := ociimage.ReadArchive(path)
	if err != nil {
		return err
	}
	defer done()
	for name, img := range imgs {
		ref, err := gcrname.ParseReference(name)
		if err != nil {
			return fmt.Errorf("failed to parse image name %s of %s: %w", name, path, err)
		}
		target := s.Registry.Host + "/" + ref.Context().RepositoryStr() + ":" + ref.Identifier()
		if _, err := s.Registry.Push(ctx, target, img); err != nil {
			return err
		}
	}
	return nil
}

// busyboxArchive writes the test workload image (busybox-static applets; the lab's pod check uses them).
func (s *Stack) busyboxArchive() (string, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return "", fmt.Errorf("failed to read busybox-static (run hack/test-bins.sh --packages): %w", err)
	}
	p := filepath.Join(s.binDir, "busybox.oci.tar")
	spec := ociimage.Image{Files: ociimage.Busybox(bb, "sh", "sleep", "echo", "cat", "ls", "hostname", "wget", "ip",
		// The lab's cross-site pod check: an HTTP server and client, ping, nc.
		"httpd", "ping", "nc", "mkdir", "timeout",
		// The lab's bulk transfer: the client counts the bytes of /big.
		"wc"), Cmd: []string{"/bin/sh"}}
	return p, ociimage.WriteArchiveFile(p, BusyboxImage, spec)
}

// createRegistryCASecret stores the registry's CA where templates reference it, labelled so that
// clusterctl move takes it along with the Clusters whose YonderConfigs name it.
func (s *Stack) createRegistryCASecret(ctx context.Context) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: RegistryCASecret, Namespace: s.HostNamespace, Labels: map[string]string{clusterctlv1.ClusterctlMoveLabel: ""}},
		Data:       map[string][]byte{"ca.crt": s.Registry.CACertPEM},
	}
	if err := s.Client.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to store the registry CA: %w", err)
	}
	return nil
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
	if s.opts.KubeProxy {
		if err := s.installKubeProxy(ctx); err != nil {
			return err
		}
	}
	return s.createRegistryCASecret(ctx)
}

// startHosts starts every site's hosts (sharing one client key) and registers them as YonderSSHHosts
// with pinned host keys, in the site's failure domain.
func (s *Stack) startHosts(ctx context.Context) error {
	keyPEM, _, err := hosts.NewClientKey()
	if err != nil {
		return fmt.Errorf("failed to create the hosts' client key: %w", err)
	}
	s.ClientKeyPEM = keyPEM
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
		if site.Unregistered {
			s.Spare[site.Name] = hs
			continue
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
