package kubeadm_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/kubeadm"
	"github.com/yonder-dev/yonder/test/labnet"
)

// kubeadm init on a full-OS host makes a cluster: its API server answers with the kubeadm-made admin
// credentials, the control-plane Node is Ready through its kubelet, and a pod runs on it.
func TestInitMakesAClusterWhoseNodeRunsAPod(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := labnet.NewForTest(t)
	hs, err := hosts.StartFullOS(ctx, n, "kadm", 1, hosts.FullOSOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	c, err := kubeadm.Init(ctx, hs[0])
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("kubeadm init took %s", time.Since(start).Round(time.Second))

	cfg, err := clientcmd.RESTConfigFromKubeConfig(c.AdminKubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		node, err := cs.CoreV1().Nodes().Get(ctx, hs[0].Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(node.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
	}, 3*time.Minute, 2*time.Second).Should(Succeed())
	t.Logf("control-plane Node Ready %s after the start of kubeadm init", time.Since(start).Round(time.Second))

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleep", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "sleep", Image: hosts.FullOSSandboxImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}
	// The controller-manager creates the namespace's default ServiceAccount shortly after it starts.
	g.Eventually(func() error {
		_, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err
	}, time.Minute, time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "sleep", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Spec.NodeName).To(Equal(hs[0].Name))
		g.Expect(p.Status.PodIP).To(HavePrefix("10.244."))
	}, 2*time.Minute, time.Second).Should(Succeed())
}
