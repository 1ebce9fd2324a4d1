package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/controlplane"
)

// StartManagement brings up a second, empty management cluster next to the stack's, the target of a
// `clusterctl move`: its own etcd, apiserver and controller-manager, the providers installed by the real
// `clusterctl init` from the same release, and their managers run as processes. It shares the stack's lab
// network, artifact server, workload cluster and hosts, and holds no Yonder objects until something is moved
// into it. name must be unique among the stack's management clusters (it names the directory and the logs).
//
// The returned Stack's Management, Client, Clusterctl and manager functions act on the second cluster;
// its Stop stops only what StartManagement started (the managers and the control plane), never the
// shared hosts, workload cluster or network. The stack's own Stop does not stop it.
func (s *Stack) StartManagement(ctx context.Context, name string) (_ *Stack, rerr error) {
	t0 := time.Now()
	t, err := s.newManagement(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr != nil {
			_ = t.Stop()
		}
	}()
	// Its own cert-manager, as a user's second management cluster has (installed by clusterctl init).
	if err := t.initProviders(ctx); err != nil {
		return nil, err
	}
	if err := t.startManagers(ctx); err != nil {
		return nil, err
	}
	// clusterctl move creates objects in the namespaces they had; it does not create namespaces.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t.HostNamespace}}
	if err := t.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("failed to create namespace %s in management cluster %s: %w", t.HostNamespace, name, err)
	}
	t.opts.Log("management cluster %s up (clusterctl init, managers ready) in %s", name, time.Since(t0).Round(time.Millisecond))
	return t, nil
}

// StartUserManagement brings up a second management cluster as a user has one before following
// docs/quickstart.md: its control plane, and cert-manager installed and running — the cert-manager
// manifest of the release's local repository (the one `clusterctl init` would install) applied, and its
// real controller, cainjector and webhook (test/certmanager) — but no provider. The caller installs the providers with
// the real `clusterctl init` against Management.AdminKubeconfigPath, which finds cert-manager's API ready
// and installs none of its own, and then calls RunProviders. Stop as for StartManagement.
func (s *Stack) StartUserManagement(ctx context.Context, name string) (_ *Stack, rerr error) {
	t0 := time.Now()
	t, err := s.newManagement(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr != nil {
			_ = t.Stop()
		}
	}()
	manifest, err := s.certManagerManifest()
	if err != nil {
		return nil, err
	}
	// The whole manifest, as a user installs cert-manager: namespace, CRDs, its chart's objects; then
	// cert-manager's processes where its Deployments would run (this cluster has no Deployment controller).
	if err := t.applyManifest(ctx, manifest); err != nil {
		return nil, err
	}
	if err := t.runCertManager(ctx); err != nil {
		return nil, err
	}
	// The webhook configurations' caBundles: clusterctl init must find cert-manager's API ready, or it
	// installs a cert-manager of its own.
	if err := t.waitForCertificates(ctx); err != nil {
		return nil, err
	}
	t.opts.Log("management cluster %s up with cert-manager, no providers, in %s", name, time.Since(t0).Round(time.Millisecond))
	return t, nil
}

// RunProviders runs the provider Deployments that `clusterctl init` installed into a management cluster of
// StartUserManagement as processes (see the package comment: what the kubelet would do, nothing more), once
// cert-manager has issued their certificates and injected their CAs.
func (s *Stack) RunProviders(ctx context.Context) error {
	if s.certManager == nil {
		return fmt.Errorf("management cluster %s runs no cert-manager: start it with StartUserManagement", s.Management.Name)
	}
	t0 := time.Now()
	if err := s.waitForCertificates(ctx); err != nil {
		return err
	}
	if err := s.startManagers(ctx); err != nil {
		return err
	}
	s.opts.Log("management cluster %s: providers running in %s", s.Management.Name, time.Since(t0).Round(time.Millisecond))
	return nil
}

// newManagement starts the control plane of a second management cluster and its client (see
// StartManagement for what it shares with s). On error it stops what it started.
func (s *Stack) newManagement(ctx context.Context, name string) (_ *Stack, rerr error) {
	if name == "" || name == "management" || name == "workload" {
		return nil, fmt.Errorf("failed to start management cluster %q: the name must be non-empty and not management or workload", name)
	}
	t, err := s.sharing(name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr != nil {
			_ = t.Stop()
		}
	}()
	if err := EnsureInotifyInstances(minInotifyInstances, s.opts.Log); err != nil {
		return nil, err
	}
	// The same control plane options as the first management cluster (see Start).
	if t.Management, err = controlplane.Start(ctx, controlplane.Options{
		Name: name, BindAddress: s.Net.Gateway, Dir: filepath.Join(t.Dir, "management"),
		ExtraAPIServerArgs:         map[string]string{"enable-aggregator-routing": "true"},
		WithControllerManager:      true,
		ExtraControllerManagerArgs: map[string]string{"controllers": "*,-deployment-controller,-replicaset-controller"},
	}); err != nil {
		return nil, fmt.Errorf("failed to start management control plane %s: %w", name, err)
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	if t.Client, err = client.New(t.Management.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("failed to create the client of management cluster %s: %w", name, err)
	}
	return t, nil
}

// sharing returns a Stack for another management cluster next to s, named name (its directory and logs), that
// shares s's network, workload cluster, hosts, registry and clusterctl configuration, and whose Stop stops
// only what it started itself (shared). The caller sets its Management and Client.
func (s *Stack) sharing(name string) (*Stack, error) {
	t := &Stack{
		Dir: filepath.Join(s.Dir, name), Net: s.Net, Workload: s.Workload, WorkloadClient: s.WorkloadClient,
		ClusterctlConfig: s.ClusterctlConfig, Hosts: s.Hosts, Spare: s.Spare, ClientKeyPEM: s.ClientKeyPEM, HostNamespace: s.HostNamespace, Registry: s.Registry,
		opts: secondOpts(s.opts), clusterctl: s.clusterctl, binDir: s.binDir,
		managers: map[string]*Manager{}, shared: true,
	}
	t.logDir = filepath.Join(t.Dir, "logs")
	if err := os.MkdirAll(t.logDir, 0o750); err != nil {
		return nil, fmt.Errorf("failed to create %s: %w", t.logDir, err)
	}
	return t, nil
}

// certManagerManifest is the path of the cert-manager manifest of the release's repository (the one
// `clusterctl init` installs).
func (s *Stack) certManagerManifest() (string, error) {
	files, err := filepath.Glob(filepath.Join(s.releaseDir(), "repository", "cert-manager", "*", "cert-manager.yaml"))
	if err != nil || len(files) != 1 {
		return "", fmt.Errorf("failed to find the one cert-manager version of the release's repository (make release-manifests lays it out): %v %v", files, err)
	}
	return files[0], nil
}

// secondOpts are a second management cluster's options: no bare-metal provider, since its boot services
// would bind the same DHCP/TFTP ports on the same bridge address as the first cluster's.
func secondOpts(o Options) Options {
	o.MetalHosts = 0
	return o
}
