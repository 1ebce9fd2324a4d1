package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/testbins"
)

// The workload cluster's kube-proxy, installed the way kubeadm's addon phase installs it (Options.KubeProxy):
// a ServiceAccount bound to the system:node-proxier role, a ConfigMap with its configuration and a
// kubeconfig that reaches the API server at its address with the pod's ServiceAccount token, and a
// privileged hostNetwork DaemonSet on every Node. It makes the workload cluster's ClusterIP Services work on
// Yonder's nodes as they do on a user's cluster, where the cluster's own kube-proxy (or its replacement)
// runs on every Node, Yonder's included.
const (
	// KubeProxyImage is the image of the DaemonSet: kube-proxy of KubernetesVersion with Debian's iptables,
	// pulled through the stack's registry (a mirror of yonder.test), as a cluster whose kubeadm
	// imageRepository names a private registry pulls it.
	KubeProxyImage = "yonder.test/kube-proxy:" + KubernetesVersion
	// KubeProxyName names the DaemonSet, its ServiceAccount and ConfigMap in kube-system (kubeadm's names).
	KubeProxyName = "kube-proxy"
)

// kubeProxyArchive writes the kube-proxy image: the binary test-bins built and a working iptables (the
// nf_tables backend, the default of the distributions kube-proxy's own image targets).
func (s *Stack) kubeProxyArchive() (string, error) {
	bin, err := testbins.Path("kube-proxy")
	if err != nil {
		return "", err
	}
	files, err := ociimage.IptablesFiles()
	if err != nil {
		return "", err
	}
	files = append(files, ociimage.File{Path: "usr/local/bin/kube-proxy", Source: bin, Mode: 0o755})
	p := filepath.Join(s.binDir, "kube-proxy.oci.tar")
	return p, ociimage.WriteArchiveFile(p, KubeProxyImage, ociimage.Image{Files: files, Entrypoint: []string{"/usr/local/bin/kube-proxy"}})
}

// kubeProxyObjects are the objects kubeadm's kube-proxy addon creates, for the workload API server at
// endpoint (https://host:port) and the cluster's pod CIDR.
func kubeProxyObjects(endpoint string) []client.Object {
	ns := metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": KubeProxyName}
	// conntrack.maxPerCore 0 leaves the conntrack table's size alone, as kind does: the lab's hosts are
	// network namespaces, where nf_conntrack_max is read-only. On a host of its own (a Yonder node shares
	// its host's namespace) kube-proxy's default sizing applies.
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: %s
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
conntrack:
  maxPerCore: 0
`, PodCIDR)
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: default
  cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: %s
contexts:
- name: default
  context: {cluster: default, namespace: default, user: default}
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
`, endpoint)
	hostPathFileOrCreate := corev1.HostPathFileOrCreate
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: KubeProxyName, Namespace: ns}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-proxier"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: KubeProxyName, Namespace: ns}},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: KubeProxyName, Namespace: ns, Labels: map[string]string{"app": KubeProxyName}},
			Data:       map[string]string{"config.conf": config, "kubeconfig.conf": kubeconfig},
		},
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: KubeProxyName, Namespace: ns, Labels: labels},
			Spec: appsv1.DaemonSetSpec{
				Selector:       &metav1.LabelSelector{MatchLabels: labels},
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						Containers: []corev1.Container{{
							Name: KubeProxyName, Image: KubeProxyImage, ImagePullPolicy: corev1.PullIfNotPresent,
							Command:         []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"},
							Env:             []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
							SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
							// kubeadm's DaemonSet has no probe; this one makes Ready mean "rules synced" (kube-proxy's
							// healthz answers 200 once its first sync is done), which WaitKubeProxy waits for.
							ReadinessProbe: &corev1.Probe{
								ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(10256)}},
								PeriodSeconds: 2,
							},
							VolumeMounts: []corev1.VolumeMount{
								{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"},
								{Name: "xtables-lock", MountPath: "/run/xtables.lock"},
								{Name: "lib-modules", MountPath: "/lib/modules", ReadOnly: true},
							},
						}},
						HostNetwork:        true,
						PriorityClassName:  "system-node-critical",
						ServiceAccountName: KubeProxyName,
						NodeSelector:       map[string]string{corev1.LabelOSStable: "linux"},
						Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						Volumes: []corev1.Volume{
							{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: KubeProxyName}}}},
							{Name: "xtables-lock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/xtables.lock", Type: &hostPathFileOrCreate}}},
							{Name: "lib-modules", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/lib/modules"}}},
						},
					},
				},
			},
		},
	}
}

// installKubeProxy creates kube-proxy's objects in the workload cluster; its pods start as Nodes join.
func (s *Stack) installKubeProxy(ctx context.Context) error {
	for _, o := range kubeProxyObjects(s.Workload.Endpoint) {
		if err := s.WorkloadClient.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create kube-proxy's %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// WaitKubeProxy waits until a kube-proxy pod is Ready on each of nodes: its rules are then in place (the
// readiness probe asks kube-proxy's healthz, which answers 200 once the first sync is done).
func (s *Stack) WaitKubeProxy(ctx context.Context, nodes []string, timeout time.Duration) error {
	var missing []string
	err := WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := s.WorkloadClient.List(ctx, pods, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{"k8s-app": KubeProxyName}); err != nil {
			return false, nil //nolint:nilerr // transient: keep waiting
		}
		ready := map[string]bool{}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready[p.Spec.NodeName] = true
				}
			}
		}
		missing = missing[:0]
		for _, n := range nodes {
			if !ready[n] {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("kube-proxy is not Ready on %s after %s: %w", strings.Join(missing, ", "), timeout, err)
	}
	return nil
}
