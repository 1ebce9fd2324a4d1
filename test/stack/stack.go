// Package stack brings up a whole Yonder management stack on this machine, the way a user installs it,
// for the end-to-end suite (test/e2e) and the local lab (`kubectl yonder lab up`):
//
//   - a lab network (test/labnet) whose bridge address every server below binds to;
//   - a MANAGEMENT control plane: real etcd, kube-apiserver and kube-controller-manager (garbage collection,
//     ClusterRole aggregation), no nodes and no Deployment/ReplicaSet controllers (so no Pod is created),
//     started with --enable-aggregator-routing so the apiserver calls webhooks at their Service's
//     EndpointSlice addresses;
//   - the providers installed by the REAL `clusterctl init --core cluster-api --bootstrap yonder
//     --control-plane yonder --infrastructure yonder-ssh` from the local repository that
//     `make release-manifests` lays out (the stack runs that target into its own directory), with CAPI's
//     kubeadm bootstrap and control-plane providers beside Yonder's when Options.KubeadmProviders is set;
//   - each provider's Deployment then run as a PROCESS: the same binary (capi-manager for the core
//     provider, capi-kubeadm-*-manager for CAPI's kubeadm providers, for ours the binaries the release's images carry), the Deployment's own command-line arguments and
//     POD_NAMESPACE, authenticated as the Deployment's ServiceAccount (a TokenRequest token, so the
//     components' RBAC is exercised), serving webhooks with the certificate from the Secret the
//     Deployment mounts, on the lab bridge address that the stack writes into an EndpointSlice of the
//     webhook Service. Only what a Pod would get from the kubelet is added: ports, cert dir, kubeconfig;
//   - a WORKLOAD control plane (etcd, apiserver, controller-manager, scheduler) that YonderControlPlane
//     attaches, whose admin kubeconfig is stored as a Secret in the management cluster;
//   - per site, network-namespace hosts running real sshd (test/hosts), registered as YonderSSHHosts
//     (Unregistered sites' hosts are only started, Stack.Spare: a test registers or joins them as a user);
//   - a real OCI registry on the bridge (test/registry: distribution, TLS with its own CA) holding every
//     image the release built (`make release-manifests`: managers, add-on, the agent artifact, a node image
//     per Kubernetes version) under ghcr.io/yonder-dev's paths, so it is the providers' image repository
//     (clusterctl init's YONDER_IMAGE_REPOSITORY) and a mirror of ghcr.io, registry.k8s.io and yonder.test
//     for the nodes' containerd; its CA is the Secret RegistryCASecret, which templates name (TemplateEnv). Hosts get the
//     agent by its sha256 from there and their node software from the node image of the Machine's version:
//     nothing is written into templates for them;
//   - optionally (Options.MetalHosts) bare-metal hosts: the metal provider installed by the same
//     `clusterctl init` (--infrastructure yonder-ssh,yonder-metal) with its boot services on the lab bridge
//     set through its clusterctl variables, the Redfish emulator whose power actions run QEMU VMs with
//     software TPMs on taps of that bridge, and a BareMetalHost + BMC Secret per VM (see metal.go);
//   - optionally (Options.Prometheus) the real Prometheus (test/prometheus) scraping every manager's
//     authenticated HTTPS metrics endpoint, CAPI's included, as a ServiceAccount bound to the shipped
//     metrics-reader role (see prometheus.go).
//
// cert-manager: clusterctl init installs cert-manager from the local repository (its namespace, real CRDs,
// and its webhook's Service and fail-closed webhook configurations as its chart has them) and checks its API
// with its own test resources. While init waits for that, the stack starts the REAL cert-manager
// controller, cainjector and webhook as processes (test/certmanager) where the Deployments would run, and
// routes the webhook's Service to the webhook; init's test resources then pass through it. After init the
// stack waits until every Certificate of the installed components is Ready through the Issuer it names and
// every webhook configuration and CRD annotated with cert-manager.io/inject-ca-from(-secret) carries that
// CA — what a user's cert-manager does.
//
// Usage:
//
//	s, err := stack.Start(ctx, stack.Options{Sites: []stack.Site{{Name: "east", Hosts: 3}}})
//	defer s.Stop()
//	s.Clusterctl(ctx, "generate", "cluster", "edge", "--flavor", "ssh", …)
//	s.KillManager("infrastructure-yonder-ssh"); s.StartManager(ctx, "infrastructure-yonder-ssh")
//	other, err := s.StartManagement(ctx, "other")   // a second, empty management cluster
//	pivot, err := s.ManageFromWorkload(ctx)          // the workload cluster managing, providers as its Pods
//	s.AddRelease(ctx, "v0.2.0"); s.Clusterctl(ctx, s.InitEnv(), "upgrade", "apply", …); s.ReloadManagers(ctx)
//
// Everything Start creates (processes, namespaces, links, directories) is removed by Stop, also after a
// failed Start. The caller must be root (network namespaces, bridges).
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/yonder-dev/yonder/test/registry"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/certmanager"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/prometheus"
	"github.com/yonder-dev/yonder/test/testbins"
)

// KubernetesVersion is the version of the workload control plane and of the kubelet nodes run.
const KubernetesVersion = "v1.36.3"

// PreviousKubernetesVersion is the second, kubelet-only version (hack/test-bins.sh KUBELET_PREVIOUS_VERSION)
// the release has a node image for: the version a MachineDeployment is bumped from.
const PreviousKubernetesVersion = "v1.36.2"

// PodCIDR is the workload cluster's pod network (the controller-manager allocates node CIDRs from it).
const PodCIDR = "10.244.0.0/16"

// HostPrivateDirs are the directories each host gets its own empty copy of, so what one host's bootstrap
// writes (agent state, sentinels, kubelet config) is invisible to the others, as on separate machines.
// /usr/local/bin is where the bootstrap installs yonder-agent: shared, it would land on this machine itself,
// where every other test's host would then find an agent it never installed (the SSH provider's cleanup
// runs `yonder-agent reset` instead of its configured commands when one is on the PATH).
// /var/lib as a whole, not only /var/lib/yonder: it keeps each host's node state apart wherever the agent
// or kubelet put it.
var HostPrivateDirs = []string{"/run", "/var/lib", "/etc/kubernetes", "/etc/yonder", "/usr/local/bin", "/usr/local/sbin", hosts.HomeDir}

// Site is one group of hosts; its name is the hosts' failure domain.
type Site struct {
	// Name is the failure domain and the prefix of the hosts' names.
	Name string
	// Hosts is how many hosts the site has.
	Hosts int
	// Unregistered hosts are started but not registered as YonderSSHHosts (Stack.Spare): a test registers
	// them the way a user does (`kubectl yonder host add`), or joins them by hand (manual-bootstrap).
	Unregistered bool
}

// Options says what to start.
type Options struct {
	// Dir holds everything the stack writes (default: a new temporary directory, removed by Stop).
	Dir string
	// Sites are the host groups; their hosts are registered as YonderSSHHosts in HostNamespace.
	Sites []Site
	// HostNamespace is the management namespace of the YonderSSHHosts and Clusters (default "default").
	HostNamespace string
	// FastNodeMonitoring makes a stopped kubelet's Node NotReady in ~20s (MachineHealthCheck scenarios).
	FastNodeMonitoring bool
	// ClusterTopology enables CAPI's ClusterClass support (the CLUSTER_TOPOLOGY variable of clusterctl init).
	ClusterTopology bool
	// MetalHosts is how many bare-metal hosts (QEMU VMs behind the Redfish emulator) to add, 0 to 20;
	// with any, the metal provider is installed too.
	MetalHosts int
	// MetalDiskImage makes the bare-metal hosts able to become Nodes the way CAPM3 users' hosts do: each VM
	// gets a disk (MetalDiskBytes, sparse) and the memory a node needs (MetalNodeMemoryMiB), and the cloud
	// OS image (test/osimage: Debian with cloud-init and what a Yonder node needs from its OS) is served
	// beside the boot artifacts, where an operator may put images too. MetalImageEnv returns the clusterctl
	// variables that make `--flavor metal` write it to the hosts' disks.
	MetalDiskImage bool
	// KubeadmProviders installs CAPI's kubeadm bootstrap and control-plane providers (CABPK, KCP) beside
	// Yonder's with the same `clusterctl init`, and runs them like the others: the compatibility scenarios'
	// real peers (docs/compatibility.md).
	KubeadmProviders bool
	// ExtraImages are further image archives (key → path) pushed into the stack's registry under their names'
	// paths; nodes pull them through it (the lab's network add-on images, named ghcr.io/yonder-dev/…).
	ExtraImages map[string]string
	// Prometheus starts the real Prometheus (test/prometheus, Stack.Prometheus) scraping every manager's
	// authenticated metrics endpoint as a ServiceAccount bound to the shipped metrics-reader role. Off by
	// default: suites that do not assert metrics do not pay for it.
	Prometheus bool
	// KubeProxy runs kube-proxy on the workload cluster's Nodes, installed as kubeadm's addon phase does
	// (a DaemonSet, kubeproxy.go): ClusterIP Services work on them as on a user's cluster. Off by default:
	// suites that reach pods by their addresses do not pay for it.
	KubeProxy bool
	// StartTimeout bounds Start after its builds (0: only ctx bounds it). The builds are left out: how long
	// they take depends on the Go build cache and on what else compiles at the same time (go test runs
	// several packages at once, and each suite builds the managers), not on the stack.
	StartTimeout time.Duration
	// Log receives progress lines (default: discarded).
	Log func(format string, args ...any)
}

// Stack is a running management stack.
type Stack struct {
	// Dir holds the stack's files: release/ (components, repository, clusterctl.yaml), bin/, logs/, pki/.
	Dir string
	// Net is the lab network every server binds to.
	Net *labnet.Network
	// Management is the management cluster's control plane; Client is an admin client for it.
	Management *controlplane.ControlPlane
	Client     client.Client
	// Workload is the cluster YonderControlPlane attaches and nodes join.
	Workload *controlplane.ControlPlane
	// WorkloadClient is an admin client of the workload cluster.
	WorkloadClient client.Client
	// ClusterctlConfig is the generated clusterctl.yaml; clusterctl the binary.
	ClusterctlConfig string
	// Hosts are the running hosts per site name, registered as YonderSSHHosts.
	Hosts map[string][]*hosts.Host
	// Spare are the running hosts of the Unregistered sites, per site name.
	Spare map[string][]*hosts.Host
	// ClientKeyPEM is the private key every host's sshd accepts (also in the Secret yonder-hosts-ssh).
	ClientKeyPEM []byte
	// HostNamespace is where YonderSSHHosts (and the workload kubeconfig Secret) live.
	HostNamespace string
	// Registry is the stack's OCI registry.
	Registry *registry.Registry
	// Prometheus scrapes every manager (jobs ProvidersJob and CAPIJob) with Options.Prometheus; nil without.
	Prometheus *prometheus.Prometheus

	opts       Options
	ownDir     bool
	clusterctl string
	binDir     string
	logDir     string
	// certManager is the real cert-manager serving this management cluster (runCertManager).
	certManager *certmanager.CertManager
	// scrapeToken is Prometheus's bearer token (ScrapeToken).
	scrapeToken string

	mu       sync.Mutex
	managers map[string]*Manager
	// metal is the bare-metal site (nil without MetalHosts).
	metal *metal
	// shared marks a second management cluster (StartManagement): its network, workload cluster and
	// hosts belong to the stack that started it, which stops them.
	shared bool
	// onWorkload marks the workload cluster acting as a management cluster (ManageFromWorkload): its
	// providers run as Pods there, and podRoutes lets the API server reach them.
	onWorkload bool
	podRoutes  *podRoutes
	// stopped: Stop of a Stack of ManageFromWorkload ran (a test may stop it before its cleanup does).
	stopped bool
}

// Scheme is the scheme of the management client: core types, CAPI and Yonder's kinds.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme, controlplanev1.AddToScheme, infrav1.AddToScheme,
	}, metalSchemes...) {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("failed to build the management scheme: %w", err)
		}
	}
	return s, nil
}

// Start brings the stack up. On error everything started so far is stopped again.
func Start(ctx context.Context, opts Options) (_ *Stack, rerr error) {
	if err := labnet.RequireRoot(); err != nil {
		return nil, err
	}
	if err := opts.complete(); err != nil {
		return nil, err
	}
	// Every manager, apiserver, kubelet and containerd holds inotify instances; with other stacks on the same
	// machine the kernel's default of 128 per user runs out (seen: a kubelet failing "inotify_init: too many
	// open files" and never registering its Node).
	if err := EnsureInotifyInstances(minInotifyInstances, opts.Log); err != nil {
		return nil, err
	}
	s := &Stack{opts: opts, HostNamespace: opts.HostNamespace, Hosts: map[string][]*hosts.Host{}, Spare: map[string][]*hosts.Host{}, managers: map[string]*Manager{}}
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "yonder-stack-")
		if err != nil {
			return nil, fmt.Errorf("failed to create the stack directory: %w", err)
		}
		s.Dir, s.ownDir = d, true
	} else {
		s.Dir = opts.Dir
	}
	defer func() {
		if rerr != nil {
			_ = s.Stop()
		}
	}()
	for i, p := range []struct {
		run func(context.Context) error
		// done is logged with the phase's duration (a phase without one logs itself).
		done string
	}{
		// Builds run while nothing else is up yet: they are the slow part of a cold start. They stay first:
		// StartTimeout starts counting after them.
		{s.prepare, "built the release (manifests, images and the binaries they carry)"},
		{s.startNetwork, ""},
		{s.startManagementPlane, "management control plane up"},
		{s.initProviders, ""},
		{s.startManagers, "managers ready"},
		{s.startPrometheus, ""},
		{s.startWorkload, "workload control plane up"},
		{s.startHosts, "hosts up and registered"},
	} {
		t0 := time.Now()
		if err := p.run(ctx); err != nil {
			return nil, err
		}
		if p.done != "" {
			opts.Log("%s in %s", p.done, time.Since(t0).Round(time.Millisecond))
		}
		if i == 0 && opts.StartTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, opts.StartTimeout)
			defer cancel()
		}
	}
	if opts.MetalHosts > 0 {
		t0 := time.Now()
		if err := s.startMetal(ctx); err != nil {
			return nil, err
		}
		opts.Log("%d bare-metal host(s) registered and inspected over Redfish (available) in %s", opts.MetalHosts, time.Since(t0).Round(time.Millisecond))
	}
	return s, nil
}

// complete fills in the defaults and refuses options Start cannot run with.
func (opts *Options) complete() error {
	if opts.HostNamespace == "" {
		opts.HostNamespace = metav1.NamespaceDefault
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	seen := map[string]bool{}
	for _, site := range opts.Sites {
		if site.Name == "" || site.Hosts < 0 || seen[site.Name] {
			return fmt.Errorf("failed to start the stack: site names must be unique and non-empty, host counts not negative: %+v", opts.Sites)
		}
		seen[site.Name] = true
	}
	if opts.MetalDiskImage && opts.MetalHosts == 0 {
		return fmt.Errorf("failed to start the stack: MetalDiskImage needs MetalHosts")
	}
	if opts.MetalHosts < 0 || opts.MetalHosts > 20 {
		return fmt.Errorf("failed to start the stack: MetalHosts must be 0 to 20, got %d", opts.MetalHosts)
	}
	return nil
}

// prepare creates the stack's directories, finds clusterctl and builds the release (manifests, images and
// the managers' binaries).
func (s *Stack) prepare(ctx context.Context) error {
	s.binDir, s.logDir = filepath.Join(s.Dir, "bin"), filepath.Join(s.Dir, "logs")
	for _, d := range []string{s.binDir, s.logDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("failed to create %s: %w", d, err)
		}
	}
	var err error
	if s.clusterctl, err = testbins.Path("clusterctl"); err != nil {
		return err
	}
	return s.build(ctx)
}

// startNetwork creates the lab network and starts the registry on it.
func (s *Stack) startNetwork(ctx context.Context) error {
	var err error
	if s.Net, err = labnet.New(ctx); err != nil {
		return fmt.Errorf("failed to create the lab network: %w", err)
	}
	return s.startRegistry(ctx)
}

// startManagementPlane starts the management cluster's control plane and the stack's client of it.
func (s *Stack) startManagementPlane(ctx context.Context) error {
	var err error
	if s.Management, err = controlplane.Start(ctx, controlplane.Options{
		Name: "management", BindAddress: s.Net.Gateway, Dir: filepath.Join(s.Dir, "management"),
		// Webhook calls go to the Service's EndpointSlice addresses: the managers run on the bridge address.
		ExtraAPIServerArgs: map[string]string{"enable-aggregator-routing": "true"},
		// A management cluster needs its controller-manager: garbage collection (CAPI deletes through owner
		// references), ClusterRole aggregation (CAPI's manager role is aggregated), namespaces. Without nodes
		// the Deployment and ReplicaSet controllers would only create Pods that never schedule.
		WithControllerManager:      true,
		ExtraControllerManagerArgs: map[string]string{"controllers": "*,-deployment-controller,-replicaset-controller"},
	}); err != nil {
		return fmt.Errorf("failed to start the management control plane: %w", err)
	}
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	if s.Client, err = client.New(s.Management.Config, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("failed to create the management client: %w", err)
	}
	return nil
}

// Stop stops the managers, the hosts (which reset their nodes first), both control planes and the network,
// and removes the stack directory when Start created it. It returns every error it met.
func (s *Stack) Stop() error {
	var errs []error
	if s.Prometheus != nil {
		errs = append(errs, s.Prometheus.Stop())
	}
	if s.onWorkload {
		return s.stopOnWorkload()
	}
	s.mu.Lock()
	names := make([]string, 0, len(s.managers))
	for n := range s.managers {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, n := range names {
		if err := s.StopManager(n); err != nil {
			errs = append(errs, err)
		}
	}
	// cert-manager before its apiserver, so that it does not log a stopped apiserver as its failure.
	errs = append(errs, s.stopCertManager())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if s.shared {
		if s.Management != nil {
			errs = append(errs, s.Management.Stop())
		}
		return errors.Join(errs...)
	}
	// The VMs first: a host the metal manager still provisions is only powered off, never half-deleted.
	errs = append(errs, s.stopMetal())
	for _, hs := range append(mapValues(s.Hosts), mapValues(s.Spare)...) {
		for _, h := range hs {
			// A node's nspawn machine, kubelet and cgroups outlive sshd: reset them while the host still exists.
			if _, err := s.agentReset(ctx, h); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, s.Registry.Stop())
	if s.Workload != nil {
		errs = append(errs, s.Workload.Stop())
	}
	if s.Management != nil {
		errs = append(errs, s.Management.Stop())
	}
	if s.Net != nil {
		errs = append(errs, s.Net.Close())
	}
	if s.ownDir && os.Getenv("YONDER_KEEP_TEST_DIRS") == "" {
		errs = append(errs, os.RemoveAll(s.Dir))
	}
	return errors.Join(errs...)
}

// agentReset runs `yonder-agent reset` on a host when the agent was installed there.
func (s *Stack) agentReset(ctx context.Context, h *hosts.Host) (string, error) {
	out, err := h.Output(ctx, "if command -v yonder-agent >/dev/null; then yonder-agent reset; fi")
	if err != nil && !strings.Contains(err.Error(), "connect") {
		return out, fmt.Errorf("failed to reset host %s: %s: %w", h.Name, out, err)
	}
	return out, nil
}

// Clusterctl runs the real clusterctl against the management cluster with the stack's config and returns
// its stdout. env adds variables (NAME=value) for template and component substitution.
func (s *Stack) Clusterctl(ctx context.Context, env []string, args ...string) (string, error) {
	return s.clusterctlRun(ctx, env, append(args, "--kubeconfig", s.Management.AdminKubeconfigPath)...)
}

// ClusterctlOffline runs clusterctl with the stack's config but without a management cluster (commands
// such as `generate provider` that only read the repository).
func (s *Stack) ClusterctlOffline(ctx context.Context, env []string, args ...string) (string, error) {
	return s.clusterctlRun(ctx, env, args...)
}

func (s *Stack) clusterctlRun(ctx context.Context, env []string, args ...string) (string, error) {
	args = append(args, "--config", s.ClusterctlConfig)
	cmd := exec.CommandContext(ctx, s.clusterctl, args...)
	home := filepath.Join(s.Dir, "home")
	if err := os.MkdirAll(home, 0o750); err != nil {
		return "", err
	}
	// HOME keeps clusterctl's overrides and cache out of the user's ~/.config/cluster-api.
	cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true"}, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("failed to run clusterctl %s: %s: %w", strings.Join(args, " "), stderr.String(), err)
	}
	return stdout.String(), nil
}

// build runs `make release-manifests` into the stack directory and takes our managers from it: the
// binaries its images carry (`make images` keeps them in images/bin), so the stack's processes are what a
// user's cluster runs from the images, and no second build in another shape (cgo, paths kept) compiles
// and links them again — on a fresh clone that second build cost a minute of every make test.
func (s *Stack) build(ctx context.Context) error {
	root := testbins.RepoRoot()
	rel := filepath.Join(s.Dir, "release")
	built := make(chan error, 1)
	if s.opts.MetalHosts > 0 {
		// The initramfs's agent is its own static, stripped build; it runs beside the release's.
		go func() { built <- s.prepareMetal(ctx) }()
	} else {
		built <- nil
	}
	_, err := proc.Run(ctx, "make", "-C", root, "release-manifests", "OUT="+rel)
	if err != nil {
		err = fmt.Errorf("failed to build the release manifests: %w", err)
	}
	if err := errors.Join(err, <-built); err != nil {
		return err
	}
	s.ClusterctlConfig = filepath.Join(rel, "clusterctl.yaml")
	for _, name := range []string{"yonder-bootstrap-manager", "yonder-controlplane-manager", "yonder-ssh-manager", "yonder-metal-manager"} {
		// A hard link: the release and bin directories are both in the stack's directory.
		if err := os.Link(filepath.Join(rel, "images", "bin", name), filepath.Join(s.binDir, name)); err != nil {
			return fmt.Errorf("failed to take the %s binary from the release's images: %w", name, err)
		}
	}
	return nil
}

// clusterctlInit installs cert-manager's manifest, CAPI and our providers with the real clusterctl (which
// waits for cert-manager's API: see initProviders).
func (s *Stack) clusterctlInit(ctx context.Context) error {
	env := s.InitEnv()
	infra := "yonder-ssh"
	if s.opts.MetalHosts > 0 {
		infra += ",yonder-metal"
		if err := s.InstallMetal3CRDs(ctx); err != nil {
			return err
		}
		metalEnv, err := s.metalInitEnv()
		if err != nil {
			return err
		}
		env = append(env, metalEnv...)
	}
	bootstrap, controlPlane := "yonder", "yonder"
	if s.opts.KubeadmProviders {
		bootstrap, controlPlane = "yonder,kubeadm", "yonder,kubeadm"
	}
	if _, err := s.Clusterctl(ctx, env, "init", "--core", "cluster-api", "--bootstrap", bootstrap, "--control-plane", controlPlane,
		"--infrastructure", infra); err != nil {
		return err
	}
	return nil
}

// InitEnv is what a user sets for `clusterctl init` (and again for `clusterctl upgrade apply`, which
// renders the new components with the variables of its own environment): the image repository — the
// release pins the agent's sha256 in the components — and ClusterClass support.
func (s *Stack) InitEnv() []string {
	return []string{"YONDER_IMAGE_REPOSITORY=" + s.ImageRepository(), fmt.Sprintf("CLUSTER_TOPOLOGY=%t", s.opts.ClusterTopology)}
}

// AddRelease lays out another version of the Yonder providers in the stack's clusterctl repository, from
// the components and images `make release-manifests` built at Start (hack/release-repo.sh keeps the
// versions already there): the next release as `clusterctl upgrade plan` finds it. The stack's
// clusterctl config points at that version from then on.
func (s *Stack) AddRelease(ctx context.Context, version string) error {
	root := testbins.RepoRoot()
	if _, err := proc.Run(ctx, filepath.Join(root, "hack", "release-repo.sh"), s.releaseDir(), version); err != nil {
		return fmt.Errorf("failed to add release %s to the repository: %w", version, err)
	}
	return nil
}

// releaseDir is where `make release-manifests` wrote the release at Start (the directory of the clusterctl
// config), shared with the management clusters of StartManagement.
func (s *Stack) releaseDir() string { return filepath.Dir(s.ClusterctlConfig) }

// Logs returns the directory of every process's log.
func (s *Stack) Logs() string { return s.logDir }

// handedOut are the ports freeAddr returned in this process: a port is only bound by its manager later,
// and the kernel may return a port that is free now to the next bind(0) again (seen: a manager's webhook
// and health ports the same, "address already in use" at start).
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freeAddr returns host:port of a free port on the bridge address, never one it returned before.
func (s *Stack) freeAddr() (string, int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		// Free on every address, not only the bridge's: a manager's webhook server binds its port on all
		// addresses, and another stack (another test process) may hold that port on its own bridge address
		// (seen: "listen tcp :39847: bind: address already in use" while an e2e stack had 10.250.3.1:39847).
		port, err := proc.FreePort("0.0.0.0")
		if err != nil {
			return "", 0, err
		}
		if handedOut.ports[port] {
			continue
		}
		handedOut.ports[port] = true
		return net.JoinHostPort(s.Net.Gateway.String(), fmt.Sprint(port)), port, nil
	}
	return "", 0, fmt.Errorf("failed to find a port on %s that was not handed out before", s.Net.Gateway)
}

// mapValues returns a map's values.
func mapValues[V any](m map[string]V) []V {
	vs := make([]V, 0, len(m))
	for _, v := range m {
		vs = append(vs, v)
	}
	return vs
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
