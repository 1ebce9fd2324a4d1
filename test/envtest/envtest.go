// Package envtest is the MANAGEMENT cluster of Yonder's integration tests: a real kube-apiserver and
// etcd (controller-runtime's envtest, with binaries from hack/test-bins.sh), the CAPI CRDs and admission
// webhooks, the CAPI core reconcilers (Cluster, Machine, MachineSet, MachineDeployment,
// MachineHealthCheck) wired with a ClusterCache exactly as the CAPI manager wires them, and the caller's
// own CRDs, webhooks and reconcilers in the same manager.
//
// The workload cluster that CAPI's ClusterCache connects to is a second, separate control plane (package
// test/controlplane), so Node/Machine matching, drain and health checks cross a real API boundary.
package envtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	addonsv1beta1 "sigs.k8s.io/cluster-api/api/addons/v1beta1"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1alpha1 "sigs.k8s.io/cluster-api/api/ipam/v1alpha1"
	ipamv1beta1 "sigs.k8s.io/cluster-api/api/ipam/v1beta1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	runtimev1alpha1 "sigs.k8s.io/cluster-api/api/runtime/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	clusterreconciler "sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	machinereconciler "sigs.k8s.io/cluster-api/core/reconcilers/machine"
	mdreconciler "sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	mhcreconciler "sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	msreconciler "sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	"sigs.k8s.io/cluster-api/core/setup"
	coreadmission "sigs.k8s.io/cluster-api/core/webhooks/admission"
	"sigs.k8s.io/cluster-api/core/webhooks/conversion"
	"sigs.k8s.io/cluster-api/util/index"
	"sigs.k8s.io/cluster-api/util/test/builder"

	"github.com/yonder-dev/yonder/test/testbins"
)

// ControllerName is the name the in-process CAPI controllers use (field owner, user agent).
const ControllerName = "capi-controller-manager"

// Options describes what runs in the management cluster besides CAPI.
type Options struct {
	// CRDDirectoryPaths are directories of CRD manifests to install (relative paths are resolved from the
	// repository root), e.g. "bootstrap/config/crd/bases".
	CRDDirectoryPaths []string
	// WebhookManifestPaths are admission webhook manifests (controller-gen's manifests.yaml) of the
	// caller's webhooks, installed so that the apiserver calls the webhooks served by this manager.
	WebhookManifestPaths []string
	// AddToScheme registers the caller's API types.
	AddToScheme []func(*runtime.Scheme) error
	// Setup registers the caller's indexes, webhooks and reconcilers with the manager before it starts.
	Setup func(ctx context.Context, env *Environment) error
	// WithoutCAPIControllers leaves the CAPI core reconcilers out (their CRDs and webhooks stay).
	WithoutCAPIControllers bool
}

// Environment is a running management cluster.
type Environment struct {
	manager.Manager
	client.Client
	// Config is an admin rest config for the management apiserver.
	Config *rest.Config
	// ClusterCache is CAPI's cache of workload cluster connections, shared with the caller's reconcilers.
	ClusterCache clustercache.ClusterCache

	testEnv *crenvtest.Environment
	cancel  context.CancelFunc
	done    chan error
}

var logOnce sync.Once

func setupLogging() {
	logOnce.Do(func() {
		fs := flagSet()
		level := "0"
		if v := os.Getenv("YONDER_TEST_LOG_LEVEL"); v != "" {
			level = v
		}
		_ = fs.Set("v", level)
		ctrl.SetLogger(klog.Background())
	})
}

// Start starts the management cluster and the manager, and returns once webhooks answer.
func Start(ctx context.Context, opts Options) (_ *Environment, rerr error) {
	setupLogging()
	te, err := apiServer(opts)
	if err != nil {
		return nil, err
	}
	cfg, err := te.Start()
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("failed to start the management kube-apiserver and etcd from %s (rebuild with `make test-bins` if a binary is broken): %w", te.BinaryAssetsDirectory, err)
	}
	env := &Environment{Config: cfg, testEnv: te, done: make(chan error, 1)}
	defer func() {
		if rerr != nil {
			_ = te.Stop()
		}
	}()
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:  te.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   setup.ManagerCacheOptions(te.Scheme, ControllerName, "", 10*time.Minute),
		Client:  setup.ManagerClientOptions(),
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    te.WebhookInstallOptions.LocalServingHost,
			Port:    te.WebhookInstallOptions.LocalServingPort,
			CertDir: te.WebhookInstallOptions.LocalServingCertDir,
		}),
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create the management manager: %w", err)
	}
	env.Manager, env.Client = mgr, mgr.GetClient()
	mgrCtx, cancel := context.WithCancel(ctx)
	env.cancel = cancel
	if err := setupCAPI(mgrCtx, env, !opts.WithoutCAPIControllers); err != nil {
		cancel()
		return nil, err
	}
	if opts.Setup != nil {
		if err := opts.Setup(mgrCtx, env); err != nil {
			cancel()
			return nil, fmt.Errorf("failed to set up the caller's reconcilers: %w", err)
		}
	}
	go func() { env.done <- mgr.Start(mgrCtx) }()
	if err := env.waitForWebhooks(ctx); err != nil {
		cancel()
		return nil, err
	}
	return env, nil
}

// apiServer describes the management apiserver and etcd: the binaries of hack/test-bins.sh, CAPI's CRDs
// and webhooks with the caller's, and a scheme with CAPI's types and the caller's.
func apiServer(opts Options) (*crenvtest.Environment, error) {
	binDir, err := testbins.Dir()
	if err != nil {
		return nil, err
	}
	capiDir, err := moduleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, admissionv1.AddToScheme,
		clusterv1.AddToScheme, clusterv1beta1.AddToScheme, addonsv1.AddToScheme, ipamv1.AddToScheme, runtimev1.AddToScheme,
		// CAPI's webhooks also convert from the older versions of its types.
		addonsv1beta1.AddToScheme, ipamv1alpha1.AddToScheme, ipamv1beta1.AddToScheme, runtimev1alpha1.AddToScheme,
	}, opts.AddToScheme...) {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("failed to build scheme: %w", err)
		}
	}
	crdDirs := []string{filepath.Join(capiDir, "core", "config", "crd", "bases")}
	for _, d := range opts.CRDDirectoryPaths {
		crdDirs = append(crdDirs, resolve(d))
	}
	webhookFiles := []string{filepath.Join(capiDir, "core", "config", "webhook", "manifests.yaml")}
	for _, f := range opts.WebhookManifestPaths {
		webhookFiles = append(webhookFiles, resolve(f))
	}
	whOpts, err := webhookInstallOptions(webhookFiles)
	if err != nil {
		return nil, err
	}
	te := &crenvtest.Environment{
		BinaryAssetsDirectory: binDir,
		ErrorIfCRDPathMissing: true,
		CRDDirectoryPaths:     crdDirs,
		CRDs:                  genericProviderCRDs(),
		WebhookInstallOptions: whOpts,
		Scheme:                scheme,
	}
	te.ControlPlane.GetAPIServer().Configure().
		// Network namespaces (lab hosts) have no default route to guess an address from.
		Set("advertise-address", "127.0.0.1")
	return te, nil
}

// setupCAPI registers CAPI's webhooks and, when asked, its core reconcilers, the way the CAPI manager
// (sigs.k8s.io/cluster-api/core) does.
func setupCAPI(ctx context.Context, env *Environment, withControllers bool) error {
	mgr := env.Manager
	// Lets MachineHealthChecks use short node startup timeouts in tests.
	coreadmission.SetMinNodeStartupTimeoutSeconds(0)
	// CAPI's conversion to v1beta1 needs each referenced kind's API version, which the CAPI manager reads
	// from the contract label of the kind's CRD. It asks on every conversion, and listing every CRD
	// uncached (large schemas) each time was ~30 % of a 200-Machine benchmark's CPU: a kind's answer is
	// kept once found (the labels are set when the CRDs are installed; a kind not found yet is asked again).
	var contracts sync.Map // schema.GroupKind → group/version
	conversion.SetAPIVersionGetter(func(ctx context.Context, gk schema.GroupKind) (string, error) {
		if v, ok := contracts.Load(gk); ok {
			return v.(string), nil
		}
		v, err := contractAPIVersion(ctx, mgr.GetAPIReader(), gk)
		if err == nil {
			contracts.Store(gk, v)
		}
		return v, err
	})
	hooks := []interface{ SetupWebhookWithManager(ctrl.Manager) error }{
		&coreadmission.Cluster{Client: mgr.GetClient()},
		&coreadmission.ClusterClass{Client: mgr.GetClient()},
		&coreadmission.Machine{},
		&coreadmission.MachineHealthCheck{},
		&coreadmission.MachineSet{},
		&coreadmission.MachineDeployment{},
		&coreadmission.MachineDrainRule{},
		&coreadmission.ClusterResourceSet{},
		&coreadmission.ClusterResourceSetBinding{},
		&coreadmission.MachinePool{},
		&coreadmission.ExtensionConfig{},
		&coreadmission.IPAddress{},
		&coreadmission.IPAddressClaim{},
	}
	for _, h := range hooks {
		if err := h.SetupWebhookWithManager(mgr); err != nil {
			return fmt.Errorf("failed to set up CAPI webhook %T: %w", h, err)
		}
	}
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return fmt.Errorf("failed to add CAPI indexes: %w", err)
	}
	secretClient, err := setup.CreateSecretCachingClient(mgr)
	if err != nil {
		return fmt.Errorf("failed to create secret caching client: %w", err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretClient,
		Cache:        setup.ClusterCacheCacheOptions(),
		Client:       setup.ClusterCacheClientOptions(ControllerName, 20, 30),
	}, controller.Options{MaxConcurrentReconciles: 10})
	if err != nil {
		return fmt.Errorf("failed to create the ClusterCache: %w", err)
	}
	env.ClusterCache = cc
	if !withControllers {
		return nil
	}
	c := client.WithFieldOwner(mgr.GetClient(), "manager")
	opts := controller.Options{MaxConcurrentReconciles: 5, SkipNameValidation: ptrTo(true)}
	type reconciler interface {
		SetupWithManager(context.Context, ctrl.Manager, controller.Options) error
	}
	for _, r := range []reconciler{
		&clusterreconciler.Reconciler{Client: c, APIReader: mgr.GetAPIReader(), ClusterCache: cc, RemoteConnectionGracePeriod: 50 * time.Second},
		&machinereconciler.Reconciler{Client: c, APIReader: mgr.GetAPIReader(), ClusterCache: cc, RemoteConditionsGracePeriod: 5 * time.Minute},
		&msreconciler.Reconciler{Client: c, APIReader: mgr.GetAPIReader(), ClusterCache: cc},
		&mdreconciler.Reconciler{Client: c, APIReader: mgr.GetAPIReader()},
		&mhcreconciler.Reconciler{Client: c, ClusterCache: cc},
	} {
		if err := r.SetupWithManager(ctx, mgr, opts); err != nil {
			return fmt.Errorf("failed to set up CAPI reconciler %T: %w", r, err)
		}
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

func (e *Environment) waitForWebhooks(ctx context.Context) error {
	addr := net.JoinHostPort(e.testEnv.WebhookInstallOptions.LocalServingHost, strconv.Itoa(e.testEnv.WebhookInstallOptions.LocalServingPort))
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-e.done:
			return false, fmt.Errorf("manager stopped: %w", err)
		default:
		}
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("webhook server on %s did not start: %w", addr, err)
	}
	return nil
}

// Stop stops the manager, then the apiserver and etcd.
func (e *Environment) Stop() error {
	e.cancel()
	var errs []error
	select {
	case err := <-e.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	case <-time.After(30 * time.Second):
		errs = append(errs, errors.New("manager did not stop within 30s"))
	}
	if err := e.testEnv.Stop(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run is the body of a TestMain: it starts the environment, runs the tests and stops it. A start
// failure prints what to do and fails the package (it never skips).
func Run(m *testing.M, opts Options, set func(*Environment)) int {
	ctx := ctrl.SetupSignalHandler()
	env, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the management test environment did not start: %v\n", err)
		return 1
	}
	set(env)
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "warning: stopping the test environment: %v\n", err)
	}
	return code
}

// CreateNamespace creates a uniquely named namespace for one test and deletes it when the test ends.
func (e *Environment) CreateNamespace(ctx context.Context, t testing.TB, prefix string) *corev1.Namespace {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := e.Create(ctx, ns); err != nil {
		t.Fatalf("failed to create namespace: %v", err)
	}
	t.Cleanup(func() { _ = e.Delete(context.Background(), ns) })
	return ns
}

// genericProviderCRDs are CAPI's generic test provider kinds (infrastructure, bootstrap, control plane
// and remediation), for tests of CAPI behaviour that does not involve a Yonder provider.
func genericProviderCRDs() []*apiextensionsv1.CustomResourceDefinition {
	return []*apiextensionsv1.CustomResourceDefinition{
		builder.GenericBootstrapConfigCRD.DeepCopy(),
		builder.GenericBootstrapConfigTemplateCRD.DeepCopy(),
		builder.GenericControlPlaneCRD.DeepCopy(),
		builder.GenericControlPlaneTemplateCRD.DeepCopy(),
		builder.GenericInfrastructureMachineCRD.DeepCopy(),
		builder.GenericInfrastructureMachineTemplateCRD.DeepCopy(),
		builder.GenericInfrastructureClusterCRD.DeepCopy(),
		builder.GenericInfrastructureClusterTemplateCRD.DeepCopy(),
		builder.GenericRemediationCRD.DeepCopy(),
		builder.GenericRemediationTemplateCRD.DeepCopy(),
	}
}

// webhookInstallOptions reads controller-gen webhook manifests. Configuration names get the file's
// index as suffix, since every provider names its configurations the same.
func webhookInstallOptions(files []string) (crenvtest.WebhookInstallOptions, error) {
	opts := crenvtest.WebhookInstallOptions{
		MaxTime:      20 * time.Second,
		PollInterval: time.Second,
		// CAPI types are convertible (v1beta1 ↔ v1beta2); envtest would otherwise point their CRDs at a
		// conversion webhook this test manager does not need.
		IgnoreSchemeConvertible: true,
	}
	for i, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // paths come from the test setup.
		if err != nil {
			return opts, fmt.Errorf("failed to read webhook manifest %s (run `make generate`?): %w", f, err)
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				return opts, fmt.Errorf("failed to parse webhook manifest %s: %w", f, err)
			}
			switch meta.Kind {
			case "MutatingWebhookConfiguration":
				w := &admissionv1.MutatingWebhookConfiguration{}
				if err := yaml.Unmarshal([]byte(doc), w); err != nil {
					return opts, err
				}
				w.Name = fmt.Sprintf("%s-%d", w.Name, i)
				opts.MutatingWebhooks = append(opts.MutatingWebhooks, w)
			case "ValidatingWebhookConfiguration":
				w := &admissionv1.ValidatingWebhookConfiguration{}
				if err := yaml.Unmarshal([]byte(doc), w); err != nil {
					return opts, err
				}
				w.Name = fmt.Sprintf("%s-%d", w.Name, i)
				opts.ValidatingWebhooks = append(opts.ValidatingWebhooks, w)
			}
		}
	}
	return opts, nil
}

var (
	modDirMu sync.Mutex
	modDirs  = map[string]string{}
)

// moduleDir returns where the Go module cache holds a dependency (CAPI's CRDs and webhook manifests
// ship in its module, not in ours).
func moduleDir(mod string) (string, error) {
	modDirMu.Lock()
	defer modDirMu.Unlock()
	if d, ok := modDirs[mod]; ok {
		return d, nil
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod)
	cmd.Dir = testbins.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("failed to locate module %s (run `go mod download`): %w", mod, err)
	}
	d := strings.TrimSpace(string(out))
	modDirs[mod] = d
	return d, nil
}

func resolve(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(testbins.RepoRoot(), p)
}

// contractAPIVersion returns group/version of the kind's API version that serves the current CAPI
// contract, from the "cluster.x-k8s.io/<contract>" label on its CRD (versions separated by "_", newest
// last), as clusterctl and CAPI's contract package read it.
func contractAPIVersion(ctx context.Context, r client.Reader, gk schema.GroupKind) (string, error) {
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := r.List(ctx, crds); err != nil {
		return "", fmt.Errorf("failed to list CRDs: %w", err)
	}
	for _, crd := range crds.Items {
		if crd.Spec.Group != gk.Group || crd.Spec.Names.Kind != gk.Kind {
			continue
		}
		if v, ok := crd.Labels[clusterv1.GroupVersion.String()]; ok && v != "" {
			versions := strings.Split(v, "_")
			return gk.Group + "/" + versions[len(versions)-1], nil
		}
		return "", fmt.Errorf("CRD %s has no %s contract label", crd.Name, clusterv1.GroupVersion.String())
	}
	return "", fmt.Errorf("no CRD serves %s", gk)
}

// APIServerPID is the process ID of the management kube-apiserver, for benchmarks that report what the
// apiserver spent (test/benchmeter.ProcessCPU). controller-runtime's envtest does not expose its process:
// it is the kube-apiserver whose arguments name this environment's own certificate directory.
func (e *Environment) APIServerPID() (int, error) {
	certDir := e.testEnv.ControlPlane.GetAPIServer().CertDir
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(string(b), "\x00")
		if filepath.Base(args[0]) == "kube-apiserver" && strings.Contains(string(b), certDir) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kube-apiserver process with certificates in %s", certDir)
}
