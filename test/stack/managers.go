package stack

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/testbins"
)

// ProviderLabel is the label clusterctl puts on every object of a provider, the Deployments included.
const ProviderLabel = "cluster.x-k8s.io/provider"

// Manager is one provider Deployment run as a process.
type Manager struct {
	// Name is the provider's clusterctl label: cluster-api, bootstrap-yonder, control-plane-yonder,
	// infrastructure-yonder-ssh.
	Name string
	// Namespace is the provider's namespace.
	Namespace string
	// Binary and Args are what runs: the Deployment's command and args plus the Pod-level additions.
	Binary string
	Args   []string
	// MetricsAddr is where it serves its metrics (host:port on the bridge address): --metrics-bind-addr,
	// or CAPI's --diagnostics-address.
	MetricsAddr string

	deployment *appsv1.Deployment
	saDir      string
	emptyDirs  []emptyDir
	env        []string
	healthAddr string
	process    *proc.Process
}

// Managers returns the names of the managers, sorted.
func (s *Stack) Managers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedKeys(s.managers)
}

// Manager returns a manager by name (nil when unknown).
func (s *Stack) Manager(name string) *Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.managers[name]
}

// startManagers turns every provider Deployment clusterctl installed into a running process.
func (s *Stack) startManagers(ctx context.Context) error {
	deps := &appsv1.DeploymentList{}
	if err := s.Client.List(ctx, deps, client.HasLabels{ProviderLabel}); err != nil {
		return fmt.Errorf("failed to list the provider Deployments: %w", err)
	}
	if len(deps.Items) == 0 {
		return fmt.Errorf("failed to find provider Deployments: clusterctl init installed none")
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		m, err := s.prepareManager(ctx, d)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.managers[m.Name] = m
		s.mu.Unlock()
	}
	for _, name := range s.Managers() {
		if err := s.StartManager(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// ReloadManagers runs the provider Deployments installed now, as a rollout replaces Pods: after `clusterctl
// upgrade apply` deleted and recreated the providers' components (Deployments, ServiceAccounts, RBAC,
// Certificates, webhook configurations), every manager is stopped and started again from its new
// Deployment, with a token of the new ServiceAccount, the certificate and CA issued again by cert-manager and its
// Services routed to it.
func (s *Stack) ReloadManagers(ctx context.Context) error {
	for _, n := range s.Managers() {
		if err := s.StopManager(n); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.managers = map[string]*Manager{}
	s.mu.Unlock()
	// The upgraded components' Certificates and webhook configurations: cert-manager (still running) issues
	// and injects them again where clusterctl replaced them.
	if err := s.waitForCertificates(ctx); err != nil {
		return err
	}
	if err := s.startManagers(ctx); err != nil {
		return err
	}
	return s.scrapeManagers(ctx)
}

// prepareManager derives the process of a Deployment: binary, args, env, certificate, credentials and
// the EndpointSlice that routes its webhook Service to the process.
func (s *Stack) prepareManager(ctx context.Context, d *appsv1.Deployment) (*Manager, error) {
	name := d.Labels[ProviderLabel]
	c, bin, args, err := managerContainer(d)
	if err != nil {
		return nil, err
	}
	binPath := filepath.Join(s.binDir, bin)
	if b, ok := upstreamBinaries[name]; ok {
		// CAPI's providers all call their binary /manager: which one it is follows from the provider.
		if binPath, err = testbins.Path(b); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(binPath); err != nil {
		return nil, fmt.Errorf("failed to find the binary %s of Deployment %s/%s: %w", bin, d.Namespace, d.Name, err)
	}
	dir := filepath.Join(s.Dir, "managers", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certDir, err := s.mountedCertificate(ctx, d, c, dir)
	if err != nil {
		return nil, err
	}
	// Credentials: what the kubelet mounts into a Pod — a token of the Deployment's ServiceAccount (so the
	// provider's RBAC is what applies), the cluster CA and the namespace — plus the in-cluster service env.
	// The process sees them at the usual path in a private mount namespace (see StartManager).
	saDir := filepath.Join(dir, "serviceaccount")
	if err := s.serviceAccountFiles(ctx, d.Namespace, d.Spec.Template.Spec.ServiceAccountName, saDir); err != nil {
		return nil, err
	}
	empty, err := emptyDirs(d, c, dir)
	if err != nil {
		return nil, err
	}
	env := []string{
		"KUBERNETES_SERVICE_HOST=" + s.Management.Host.String(), fmt.Sprintf("KUBERNETES_SERVICE_PORT=%d", s.Management.Port),
		"POD_NAMESPACE=" + d.Namespace, "POD_NAME=" + d.Name + "-stack", "HOME=" + dir, "PATH=" + os.Getenv("PATH"),
	}
	portArgs, healthAddr, metricsAddr, webhookPort, err := s.podPorts(bin, certDir)
	if err != nil {
		return nil, err
	}
	if err := s.routeWebhookService(ctx, d.Namespace, webhookPort); err != nil {
		return nil, err
	}
	return &Manager{saDir: saDir, emptyDirs: empty, Name: name, Namespace: d.Namespace, Binary: binPath, Args: append(args, portArgs...), deployment: d, env: env, healthAddr: healthAddr, MetricsAddr: metricsAddr}, nil
}

// upstreamBinaries are the cached binaries (hack/test-bins.sh) of the Cluster API providers, by provider label.
var upstreamBinaries = map[string]string{
	"cluster-api":           "capi-manager",
	"bootstrap-kubeadm":     "capi-kubeadm-bootstrap-manager",
	"control-plane-kubeadm": "capi-kubeadm-control-plane-manager",
}

// managerContainer returns the Deployment's container named manager, its binary's name and its arguments
// (command and args, as a container runtime joins them).
func managerContainer(d *appsv1.Deployment) (*corev1.Container, string, []string, error) {
	pod := d.Spec.Template.Spec
	var c *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == "manager" {
			c = &pod.Containers[i]
		}
	}
	if c == nil {
		return nil, "", nil, fmt.Errorf("failed to run Deployment %s/%s: no container named manager", d.Namespace, d.Name)
	}
	bin := "manager"
	args := append([]string{}, c.Args...)
	if len(c.Command) > 0 {
		bin = path.Base(c.Command[0])
		args = append(append([]string{}, c.Command[1:]...), args...)
	}
	return c, bin, args, nil
}

// mountedCertificate writes the webhook certificate — the Secret the Deployment mounts into container c —
// below dir and returns its directory ("" when the container mounts no Secret).
func (s *Stack) mountedCertificate(ctx context.Context, d *appsv1.Deployment, c *corev1.Container, dir string) (string, error) {
	certDir := ""
	for _, vm := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			sec := &corev1.Secret{}
			if err := s.Client.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: v.Secret.SecretName}, sec); err != nil {
				return "", fmt.Errorf("failed to read Secret %s/%s mounted by %s: %w", d.Namespace, v.Secret.SecretName, d.Labels[ProviderLabel], err)
			}
			certDir = filepath.Join(dir, "certs")
			if err := os.MkdirAll(certDir, 0o700); err != nil {
				return "", err
			}
			for k, val := range sec.Data {
				if err := os.WriteFile(filepath.Join(certDir, k), val, 0o600); err != nil {
					return "", err
				}
			}
		}
	}
	return certDir, nil
}

// emptyDir is an emptyDir volume of the Pod: a directory of the manager's own (Dir) that its process
// sees at the container's mount path (MountPath).
type emptyDir struct{ Dir, MountPath string }

// emptyDirs gives each emptyDir volume container c mounts a directory of its own below dir, kept across
// restarts of the process as an emptyDir survives a container restart, and removed with the stack.
func emptyDirs(d *appsv1.Deployment, c *corev1.Container, dir string) ([]emptyDir, error) {
	var out []emptyDir
	for _, vm := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.EmptyDir == nil {
				continue
			}
			ed := emptyDir{Dir: filepath.Join(dir, "volumes", v.Name), MountPath: vm.MountPath}
			if err := os.MkdirAll(ed.Dir, 0o777); err != nil { //nolint:gosec // an emptyDir is world-writable, as the kubelet makes it
				return nil, fmt.Errorf("failed to create emptyDir %s of %s: %w", v.Name, d.Labels[ProviderLabel], err)
			}
			out = append(out, ed)
		}
	}
	return out, nil
}

// podPorts gives the process what the kubelet would give a Pod: its own ports (on the bridge address) and
// the mounted cert dir. It returns the flags, the health and metrics addresses and the webhook port.
func (s *Stack) podPorts(bin, certDir string) ([]string, string, string, int, error) {
	_, webhookPort, err := s.freeAddr()
	if err != nil {
		return nil, "", "", 0, err
	}
	healthAddr, _, err := s.freeAddr()
	if err != nil {
		return nil, "", "", 0, err
	}
	metricsAddr, metricsPort, err := s.freeAddr()
	if err != nil {
		return nil, "", "", 0, err
	}
	args := []string{fmt.Sprintf("--webhook-port=%d", webhookPort), "--health-addr=" + healthAddr}
	if certDir != "" {
		args = append(args, "--webhook-cert-dir="+certDir)
	}
	if bin == "manager" {
		// CAPI's own flags: its diagnostics endpoint instead of our metrics flag.
		args = append(args, fmt.Sprintf("--diagnostics-address=%s:%d", s.Net.Gateway, metricsPort))
	} else {
		args = append(args, fmt.Sprintf("--metrics-bind-addr=%s:%d", s.Net.Gateway, metricsPort))
	}
	return args, healthAddr, metricsAddr, webhookPort, nil
}

// routeWebhookService writes an EndpointSlice for each webhook Service of the namespace that points at the
// process (what the EndpointSlice controller would write for a ready Pod).
func (s *Stack) routeWebhookService(ctx context.Context, namespace string, port int) error {
	svcs := &corev1.ServiceList{}
	if err := s.Client.List(ctx, svcs, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("failed to list Services of %s: %w", namespace, err)
	}
	for _, svc := range svcs.Items {
		eps := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-stack", Namespace: namespace,
				Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "yonder-test-stack"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{s.Net.Gateway.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		}
		for _, p := range svc.Spec.Ports {
			eps.Ports = append(eps.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}) //nolint:gosec // a TCP port
		}
		if err := s.Client.Delete(ctx, eps); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to replace EndpointSlice %s/%s: %w", namespace, eps.Name, err)
		}
		if err := s.Client.Create(ctx, eps); err != nil {
			return fmt.Errorf("failed to write EndpointSlice %s/%s: %w", namespace, eps.Name, err)
		}
	}
	return nil
}

// serviceAccountFiles writes what a Pod's service account volume holds: token, ca.crt, namespace.
func (s *Stack) serviceAccountFiles(ctx context.Context, namespace, sa, dir string) error {
	if sa == "" {
		sa = "default"
	}
	cs, err := kubernetes.NewForConfig(s.Management.Config)
	if err != nil {
		return err
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("failed to request a token for ServiceAccount %s/%s: %w", namespace, sa, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": s.Management.CACertPEM, "namespace": []byte(namespace)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("failed to write the service account files of %s/%s: %w", namespace, sa, err)
		}
	}
	return nil
}

// podMountScript runs in a private mount namespace: a tmpfs over /run (/var/run) with the service
// account files where client-go and controller-runtime look for them in a Pod, and the emptyDir volumes
// bound at their mount paths ($1 of them, as directory and mount path pairs; the mount point itself is
// created on the machine, empty, as a runtime creates it in a container's root), then execs the manager.
const podMountScript = `set -e
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/secrets/kubernetes.io/serviceaccount
cp "$0"/token "$0"/ca.crt "$0"/namespace /run/secrets/kubernetes.io/serviceaccount/
n=$1; shift
while [ "$n" -gt 0 ]; do mkdir -p "$2"; mount --bind "$1" "$2"; shift 2; n=$((n-1)); done
exec "$@"`

// StartManager starts a prepared manager (again) and waits until it reports ready.
func (s *Stack) StartManager(ctx context.Context, name string) error {
	m := s.Manager(name)
	if m == nil {
		return fmt.Errorf("failed to start manager %s: unknown (have %v)", name, s.Managers())
	}
	if m.process != nil && !m.process.Exited() {
		return nil
	}
	args := []string{"-m", "--propagation", "private", "/bin/sh", "-c", podMountScript, m.saDir, strconv.Itoa(len(m.emptyDirs))}
	for _, ed := range m.emptyDirs {
		args = append(args, ed.Dir, ed.MountPath)
	}
	args = append(append(args, m.Binary), m.Args...)
	p, err := proc.Start(name, s.logDir, m.env, "unshare", args...)
	if err != nil {
		return fmt.Errorf("failed to start manager %s: %w", name, err)
	}
	s.mu.Lock()
	m.process = p
	s.mu.Unlock()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}
	return p.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) error {
		return proc.HTTPOK(ctx, hc, "http://"+m.healthAddr+"/readyz")
	})
}

// KillManager sends SIGKILL to a manager (chaos): no graceful shutdown, no lease release.
func (s *Stack) KillManager(name string) error {
	m := s.Manager(name)
	if m == nil || m.process == nil {
		return fmt.Errorf("failed to kill manager %s: not running", name)
	}
	if err := syscall.Kill(-m.process.Pid(), syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("failed to kill manager %s: %w", name, err)
	}
	select {
	case <-m.process.Done():
	case <-time.After(5 * time.Second):
	}
	return nil
}

// StopManager stops a manager gracefully (SIGTERM, then SIGKILL after 10s, the Deployment's grace period).
func (s *Stack) StopManager(name string) error {
	m := s.Manager(name)
	if m == nil || m.process == nil {
		return nil
	}
	if err := m.process.Stop(10 * time.Second); err != nil {
		return fmt.Errorf("failed to stop manager %s: %w", name, err)
	}
	return nil
}

// ManagerLog returns the last n lines a manager wrote (of its Pods, on a Stack of ManageFromWorkload).
func (s *Stack) ManagerLog(name string, n int) string {
	if s.onWorkload {
		return s.providerPodLog(name, n)
	}
	m := s.Manager(name)
	if m == nil || m.process == nil {
		return ""
	}
	return m.process.Tail(n)
}
