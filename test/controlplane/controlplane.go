// Package controlplane starts a real Kubernetes control plane from the cached binaries: etcd,
// kube-apiserver and, optionally, kube-controller-manager and kube-scheduler. Tests use it as the
// WORKLOAD cluster (the "existing cluster" YonderControlPlane attaches), separate from the management
// cluster, and the lab uses it as the cluster whose nodes join.
//
// It is configured like a kubeadm cluster where it matters to joining nodes: one CA for serving and
// client certs (kube-controller-manager signs kubelet CSRs with it), bootstrap-token authentication,
// Node+RBAC authorization with NodeRestriction, service-account signing keys, and the bootstrapsigner and
// tokencleaner controllers. The apiserver binds to a chosen address, typically a lab bridge, so network
// namespace hosts reach it like a remote control plane.
package controlplane

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"

	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/testbins"
)

// ServiceCIDR is the service IP range of every control plane started here.
const ServiceCIDR = "10.96.0.0/16"

// Options describes the control plane to start.
type Options struct {
	// Name names the cluster in kubeconfigs (default "workload").
	Name string
	// BindAddress is where kube-apiserver listens and what it advertises (default 127.0.0.1).
	BindAddress netip.Addr
	// Port is the apiserver's secure port (default: a free port).
	Port int
	// Dir holds certificates, kubeconfigs, data and logs (default: a new temporary directory).
	Dir string
	// WithControllerManager starts kube-controller-manager: CSR signing and approval, node lifecycle,
	// bootstrap-token signing and cleanup, service accounts, garbage collection.
	WithControllerManager bool
	// WithScheduler starts kube-scheduler.
	WithScheduler bool
	// FastNodeMonitoring makes a stopped kubelet's Node NotReady in ~20s instead of ~50s (MachineHealthCheck tests).
	FastNodeMonitoring bool
	// ExtraAPIServerArgs and ExtraControllerManagerArgs override or add flags (name without dashes → value).
	ExtraAPIServerArgs         map[string]string
	ExtraControllerManagerArgs map[string]string
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	Name string
	Dir  string
	// Endpoint is the apiserver URL, e.g. https://10.250.3.1:41234.
	Endpoint string
	Host     netip.Addr
	Port     int
	// CACertPEM is the cluster CA (what a joining node pins).
	CACertPEM []byte
	// AdminKubeconfig is an admin (system:masters) kubeconfig; AdminKubeconfigPath is it on disk.
	AdminKubeconfig     []byte
	AdminKubeconfigPath string
	// Config is a rest config with admin rights.
	Config *rest.Config

	etcdURL string
	procs   []*proc.Process
	ownsDir bool
}

// Start brings the control plane up and waits until the apiserver is ready (and, when started, the
// controller-manager has created the default service account, a sign that its controllers run).
func Start(ctx context.Context, opts Options) (_ *ControlPlane, rerr error) {
	bins, err := binaries(opts)
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "workload"
	}
	if !opts.BindAddress.IsValid() {
		opts.BindAddress = netip.MustParseAddr("127.0.0.1")
	}
	cp := &ControlPlane{Name: opts.Name, Dir: opts.Dir, Host: opts.BindAddress}
	if cp.Dir == "" {
		d, err := os.MkdirTemp("", "yonder-cp-"+opts.Name+"-")
		if err != nil {
			return nil, fmt.Errorf("failed to create control plane directory: %w", err)
		}
		cp.Dir, cp.ownsDir = d, true
	}
	defer func() {
		if rerr != nil {
			_ = cp.Stop()
		}
	}()
	if opts.Port == 0 {
		p, err := proc.FreePort(opts.BindAddress.String())
		if err != nil {
			return nil, err
		}
		opts.Port = p
	} else if err := proc.CheckPortFree(opts.BindAddress.String(), opts.Port); err != nil {
		return nil, fmt.Errorf("cannot start kube-apiserver: %w", err)
	}
	cp.Port = opts.Port
	cp.Endpoint = "https://" + net.JoinHostPort(opts.BindAddress.String(), strconv.Itoa(opts.Port))
	pkiDir := filepath.Join(cp.Dir, "pki")
	if err := cp.writePKI(pkiDir, opts); err != nil {
		return nil, err
	}
	return cp, cp.startComponents(ctx, bins, pkiDir, opts)
}

// binaries finds the component binaries opts needs.
func binaries(opts Options) (map[string]string, error) {
	bins := map[string]string{}
	need := []string{"etcd", "kube-apiserver"}
	if opts.WithControllerManager {
		need = append(need, "kube-controller-manager")
	}
	if opts.WithScheduler {
		need = append(need, "kube-scheduler")
	}
	for _, b := range need {
		p, err := testbins.Path(b)
		if err != nil {
			return nil, err
		}
		bins[b] = p
	}
	return bins, nil
}

// writePKI writes the control plane's certificates, service account keys and the components'
// kubeconfigs, as kubeadm lays them out.
func (cp *ControlPlane) writePKI(pkiDir string, opts Options) error {
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	p, err := newPKI(pkiDir)
	if err != nil {
		return err
	}
	cp.CACertPEM = p.CAPEM
	serviceIP := net.ParseIP("10.96.0.1")
	if _, _, err := p.issue("apiserver", "kube-apiserver", nil, true,
		[]net.IP{net.IP(opts.BindAddress.AsSlice()), net.ParseIP("127.0.0.1"), serviceIP},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}); err != nil {
		return err
	}
	if _, _, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false, nil, nil); err != nil {
		return err
	}
	if err := p.serviceAccountKeys(); err != nil {
		return err
	}
	kubeconfigs := map[string][2]string{
		"admin":                   {"kubernetes-admin", "system:masters"},
		"kube-controller-manager": {"system:kube-controller-manager", ""},
		"kube-scheduler":          {"system:kube-scheduler", ""},
	}
	for name, subj := range kubeconfigs {
		var orgs []string
		if subj[1] != "" {
			orgs = []string{subj[1]}
		}
		certPEM, keyPEM, err := p.issue(name, subj[0], orgs, false, nil, nil)
		if err != nil {
			return err
		}
		data, err := cp.kubeconfig(subj[0], certPEM, keyPEM)
		if err != nil {
			return err
		}
		path := filepath.Join(cp.Dir, name+".kubeconfig")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
		if name == "admin" {
			cp.AdminKubeconfig, cp.AdminKubeconfigPath = data, path
		}
	}
	cp.Config, err = clientcmd.RESTConfigFromKubeConfig(cp.AdminKubeconfig)
	return err
}

// startComponents starts etcd, the apiserver and the components opts asks for.
func (cp *ControlPlane) startComponents(ctx context.Context, bins map[string]string, pkiDir string, opts Options) error {
	logDir := filepath.Join(cp.Dir, "logs")
	if err := cp.startEtcd(ctx, bins["etcd"], logDir); err != nil {
		return err
	}
	if err := cp.startAPIServer(ctx, bins["kube-apiserver"], logDir, pkiDir, opts); err != nil {
		return err
	}
	if opts.WithControllerManager {
		if err := cp.startControllerManager(ctx, bins["kube-controller-manager"], logDir, pkiDir, opts); err != nil {
			return err
		}
	}
	if !opts.WithScheduler {
		return nil
	}
	args := map[string]string{
		"kubeconfig":                filepath.Join(cp.Dir, "kube-scheduler.kubeconfig"),
		"authentication-kubeconfig": filepath.Join(cp.Dir, "kube-scheduler.kubeconfig"),
		"authorization-kubeconfig":  filepath.Join(cp.Dir, "kube-scheduler.kubeconfig"),
		"leader-elect":              "false",
		"bind-address":              "127.0.0.1",
		"secure-port":               "0",
	}
	_, err := cp.start("kube-scheduler", bins["kube-scheduler"], logDir, args)
	return err
}

func (cp *ControlPlane) startEtcd(ctx context.Context, bin, logDir string) error {
	clientPort, err := proc.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	peerPort, err := proc.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	args := map[string]string{
		"name":                        cp.Name,
		"data-dir":                    filepath.Join(cp.Dir, "etcd"),
		"listen-client-urls":          clientURL,
		"advertise-client-urls":       clientURL,
		"listen-peer-urls":            peerURL,
		"initial-advertise-peer-urls": peerURL,
		"initial-cluster":             cp.Name + "=" + peerURL,
		"unsafe-no-fsync":             "true", // test data: durability across power loss does not matter
		"quota-backend-bytes":         strconv.Itoa(2 << 30),
	}
	p, err := cp.start("etcd", bin, logDir, args)
	if err != nil {
		return err
	}
	cp.etcdURL = clientURL
	return p.WaitFor(ctx, 60*time.Second, func(ctx context.Context) error {
		return proc.HTTPOK(ctx, http.DefaultClient, clientURL+"/health")
	})
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, bin, logDir, pkiDir string, opts Options) error {
	pk := func(f string) string { return filepath.Join(pkiDir, f) }
	args := map[string]string{
		"etcd-servers":                     cp.etcdURL,
		"bind-address":                     opts.BindAddress.String(),
		"advertise-address":                opts.BindAddress.String(),
		"secure-port":                      strconv.Itoa(opts.Port),
		"client-ca-file":                   pk("ca.crt"),
		"tls-cert-file":                    pk("apiserver.crt"),
		"tls-private-key-file":             pk("apiserver.key"),
		"kubelet-client-certificate":       pk("apiserver-kubelet-client.crt"),
		"kubelet-client-key":               pk("apiserver-kubelet-client.key"),
		"service-account-issuer":           "https://kubernetes.default.svc.cluster.local",
		"service-account-key-file":         pk("sa.pub"),
		"service-account-signing-key-file": pk("sa.key"),
		"service-cluster-ip-range":         ServiceCIDR,
		"authorization-mode":               "Node,RBAC",
		"enable-admission-plugins":         "NodeRestriction",
		"enable-bootstrap-token-auth":      "true",
		"allow-privileged":                 "true",
		"kubelet-preferred-address-types":  "InternalIP,Hostname",
		"profiling":                        "false",
	}
	for k, v := range opts.ExtraAPIServerArgs {
		args[k] = v
	}
	p, err := cp.start("kube-apiserver", bin, logDir, args)
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		return err
	}
	return p.WaitFor(ctx, 90*time.Second, func(ctx context.Context) error {
		return proc.HTTPOK(ctx, hc, cp.Endpoint+"/readyz")
	})
}

func (cp *ControlPlane) startControllerManager(ctx context.Context, bin, logDir, pkiDir string, opts Options) error {
	pk := func(f string) string { return filepath.Join(pkiDir, f) }
	kc := filepath.Join(cp.Dir, "kube-controller-manager.kubeconfig")
	args := map[string]string{
		"kubeconfig":                       kc,
		"authentication-kubeconfig":        kc,
		"authorization-kubeconfig":         kc,
		"cluster-signing-cert-file":        pk("ca.crt"),
		"cluster-signing-key-file":         pk("ca.key"),
		"root-ca-file":                     pk("ca.crt"),
		"service-account-private-key-file": pk("sa.key"),
		"use-service-account-credentials":  "true",
		"controllers":                      "*,bootstrapsigner,tokencleaner",
		"service-cluster-ip-range":         ServiceCIDR,
		"leader-elect":                     "false",
		"bind-address":                     "127.0.0.1",
		"secure-port":                      "0",
	}
	if opts.FastNodeMonitoring {
		// Twice the kubelet's lease renew interval (10 s: a quarter of its 40 s lease). A grace period equal to
		// it turned healthy Nodes Unknown for ~10 s about once a minute on a loaded machine (a renewal a
		// moment late), which also deactivated the network add-on's gateways on those Nodes.
		args["node-monitor-grace-period"] = "20s"
		args["node-monitor-period"] = "1s"
	}
	for k, v := range opts.ExtraControllerManagerArgs {
		args[k] = v
	}
	p, err := cp.start("kube-controller-manager", bin, logDir, args)
	if err != nil {
		return err
	}
	c, err := client.New(cp.Config, client.Options{})
	if err != nil {
		return err
	}
	// The serviceaccount controller creating "default" in kube-system shows the controllers are running.
	return p.WaitFor(ctx, 90*time.Second, func(ctx context.Context) error {
		return c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "default"}, &corev1.ServiceAccount{})
	})
}

func (cp *ControlPlane) start(name, bin, logDir string, args map[string]string) (*proc.Process, error) {
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	argv := make([]string, 0, len(keys))
	for _, k := range keys {
		argv = append(argv, "--"+k+"="+args[k])
	}
	p, err := proc.Start(name, logDir, nil, bin, argv...)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

// kubeconfig renders a kubeconfig for a client cert.
func (cp *ControlPlane) kubeconfig(user string, certPEM, keyPEM []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cp.Name] = &clientcmdapi.Cluster{Server: cp.Endpoint, CertificateAuthorityData: cp.CACertPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	ctxName := user + "@" + cp.Name
	cfg.Contexts[ctxName] = &clientcmdapi.Context{Cluster: cp.Name, AuthInfo: user}
	cfg.CurrentContext = ctxName
	return clientcmd.Write(*cfg)
}

// WriteKubeconfigSecret stores the admin kubeconfig as CAPI's <cluster>-kubeconfig Secret in the
// management cluster (owned by the Cluster), as a control plane provider would.
func (cp *ControlPlane) WriteKubeconfigSecret(ctx context.Context, c client.Client, cluster *clusterv1.Cluster) error {
	s := kubeconfig.GenerateSecret(cluster, cp.AdminKubeconfig)
	if err := c.Create(ctx, s); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create kubeconfig Secret for Cluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
		}
		existing := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), existing); err != nil {
			return err
		}
		existing.Data = s.Data
		return c.Update(ctx, existing)
	}
	return nil
}

// Client returns an admin controller-runtime client.
func (cp *ControlPlane) Client() (client.Client, error) {
	return client.New(cp.Config, client.Options{})
}

// Logs returns the directory holding each component's log.
func (cp *ControlPlane) Logs() string { return filepath.Join(cp.Dir, "logs") }

// Stop ends every component (newest first) and removes the directory if Start created it.
func (cp *ControlPlane) Stop() error {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		_ = cp.procs[i].Stop(10 * time.Second)
	}
	cp.procs = nil
	if cp.ownsDir && os.Getenv("YONDER_KEEP_TEST_DIRS") == "" {
		return os.RemoveAll(cp.Dir)
	}
	return nil
}

// CACertPool returns the cluster CA as a pool (for clients that verify the apiserver themselves).
func (cp *ControlPlane) CACertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CACertPEM)
	return pool
}
