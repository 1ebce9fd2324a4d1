// Package kubeadm makes Kubernetes clusters with the real kubeadm on full-OS test hosts
// (test/hosts.StartFullOS): the "existing kubeadm cluster" that a YonderControlPlane attaches and that
// CABPK's workers join. Nothing is stubbed: kubeadm init writes the PKI, the static pods and the cluster's
// ConfigMaps; the host's kubelet runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler in
// containerd. Their images are the binaries hack/test-bins.sh builds, imported into the host's containerd
// the way an air-gapped site preloads them (no registry can be reached from the test machines).
package kubeadm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/testbins"
)

// Version is the Kubernetes version of the clusters: the built kubeadm's and the control plane's.
const Version = "v1.36.3"

// EtcdImageTag is the etcd that the control plane runs: the one hack/test-bins.sh builds (ETCD_VERSION),
// named by its own version rather than passed off as the etcd kubeadm would pick.
const EtcdImageTag = "3.6.16"

// Cluster is a cluster kubeadm made.
type Cluster struct {
	// Host runs the control plane.
	Host *hosts.Host
	// Endpoint is the API server's URL.
	Endpoint string
	// AdminKubeconfig is kubeadm's /etc/kubernetes/admin.conf.
	AdminKubeconfig []byte
	// CACert and CAKey are the cluster CA kubeadm made (/etc/kubernetes/pki/ca.crt, ca.key): what a user
	// stores as the Cluster's <cluster>-ca Secret for CABPK.
	CACert, CAKey []byte
}

// controlPlaneImages are the images kubeadm init runs, by name, with the cached binary each carries.
func controlPlaneImages() map[string]string {
	return map[string]string{
		"registry.k8s.io/kube-apiserver:" + Version:          "kube-apiserver",
		"registry.k8s.io/kube-controller-manager:" + Version: "kube-controller-manager",
		"registry.k8s.io/kube-scheduler:" + Version:          "kube-scheduler",
		"registry.k8s.io/etcd:" + EtcdImageTag:               "etcd",
	}
}

// LoadImages imports into the host's containerd (namespace k8s.io, where the kubelet looks) the pause image
// of hosts.FullOSSandboxImage (busybox-static's) and, for a control-plane host, the control plane's images
// built from the cached binaries: what a host with access to registry.k8s.io would pull.
func LoadImages(ctx context.Context, h *hosts.Host, controlPlane bool) error {
	if h.Root == "" {
		return fmt.Errorf("host %s is not a full-OS host (hosts.StartFullOS)", h.Name)
	}
	dir := filepath.Join(h.Root, "var", "lib", "yonder-test-images")
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a directory of the host's tree
		return err
	}
	specs := map[string]ociimage.Image{}
	if controlPlane {
		for name, bin := range controlPlaneImages() {
			p, err := testbins.Path(bin)
			if err != nil {
				return err
			}
			specs[name] = ociimage.Image{Files: []ociimage.File{
				{Path: "usr", Dir: true}, {Path: "usr/local", Dir: true}, {Path: "usr/local/bin", Dir: true},
				{Path: "usr/local/bin/" + bin, Source: p, Mode: 0o755},
			}}
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("failed to read busybox-static for the pause image (hack/test-bins.sh --packages): %w", err)
	}
	specs[hosts.FullOSSandboxImage] = ociimage.Pause(bb)
	var script strings.Builder
	script.WriteString("set -e\n")
	for name, spec := range specs {
		file := strings.NewReplacer("/", "_", ":", "_").Replace(name) + ".tar"
		if err := ociimage.WriteArchiveFile(filepath.Join(dir, file), name, spec); err != nil {
			return err
		}
		fmt.Fprintf(&script, "ctr -n k8s.io images import --local /var/lib/yonder-test-images/%s >/dev/null\n", file)
	}
	out, err := h.Output(ctx, script.String())
	if err != nil {
		return fmt.Errorf("failed to import the control plane's images on %s: %s: %w", h.Name, out, err)
	}
	return nil
}

// IgnoredPreflightErrors are the checks of kubeadm's preflight that this machine cannot pass, by name.
func IgnoredPreflightErrors() []string {
	var ignored []string
	if !hosts.CgroupV2() {
		// Cgroup v1 is in maintenance mode for the kubelet; the check fails on a v1 machine.
		ignored = append(ignored, "SystemVerification")
	}
	// A machine running other tests has swap or not; the kubelet tolerates it (failSwapOn: false).
	return append(ignored, "Swap")
}

var initConfig = template.Must(template.New("init").Parse(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: {{ .Address }}
  bindPort: 6443
nodeRegistration:
  name: {{ .Name }}
  criSocket: unix:///run/containerd/containerd.sock
  # Workloads may run on this single control-plane Node.
  taints: []
  ignorePreflightErrors:
{{- range .Ignored }}
  - {{ . }}
{{- end }}
# No add-ons: the hosts bring their own pod network (a bridge each), and nothing here needs Services.
skipPhases:
- addon/kube-proxy
- addon/coredns
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: {{ .Version }}
controlPlaneEndpoint: {{ .Address }}:6443
etcd:
  local:
    imageTag: {{ .EtcdTag }}
`))

// Init runs `kubeadm init` on h and returns the cluster once its API server answers and the control-plane
// Node is Ready.
func Init(ctx context.Context, h *hosts.Host) (*Cluster, error) {
	if h.Root == "" {
		return nil, fmt.Errorf("host %s is not a full-OS host (hosts.StartFullOS): kubeadm needs systemd and a kubelet unit", h.Name)
	}
	if err := LoadImages(ctx, h, true); err != nil {
		return nil, err
	}
	var cfg bytes.Buffer
	if err := initConfig.Execute(&cfg, map[string]any{
		"Address": h.Address.String(), "Name": h.Name, "Ignored": IgnoredPreflightErrors(),
		"Version": Version, "EtcdTag": EtcdImageTag,
	}); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(h.Root, "etc", "kubeadm"), 0o755); err != nil { //nolint:gosec // a directory of the host's tree
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(h.Root, "etc", "kubeadm", "init.yaml"), cfg.Bytes(), 0o600); err != nil {
		return nil, err
	}
	out, err := h.Output(ctx, "kubeadm init --config /etc/kubeadm/init.yaml 2>&1")
	if err != nil {
		return nil, fmt.Errorf("kubeadm init on %s failed: %w\n%s", h.Name, err, out)
	}
	admin, err := os.ReadFile(filepath.Join(h.Root, "etc", "kubernetes", "admin.conf"))
	if err != nil {
		return nil, fmt.Errorf("kubeadm init on %s wrote no admin.conf: %w", h.Name, err)
	}
	c := &Cluster{Host: h, Endpoint: "https://" + h.Address.String() + ":6443", AdminKubeconfig: admin}
	for p, f := range map[*[]byte]string{&c.CACert: "ca.crt", &c.CAKey: "ca.key"} {
		if *p, err = os.ReadFile(filepath.Join(h.Root, "etc", "kubernetes", "pki", f)); err != nil { //nolint:gosec // kubeadm's files in the host's tree
			return nil, fmt.Errorf("kubeadm init on %s wrote no CA: %w", h.Name, err)
		}
	}
	return c, nil
}

// AttachSecrets are the Secrets docs/compatibility.md has the operator create in the Cluster's namespace
// to attach this cluster with YonderControlPlane and join CABPK's workers to it: the cluster's admin
// kubeconfig (key value) as kubeconfigSecret, and the cluster CA as <cluster>-ca, which CABPK reads.
func (c *Cluster) AttachSecrets(namespace, cluster, kubeconfigSecret string) []*corev1.Secret {
	return []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: kubeconfigSecret, Namespace: namespace}, Data: map[string][]byte{"value": c.AdminKubeconfig}},
		{ObjectMeta: metav1.ObjectMeta{Name: cluster + "-ca", Namespace: namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: c.CACert, corev1.TLSPrivateKeyKey: c.CAKey}},
	}
}
