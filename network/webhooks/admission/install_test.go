package admission_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/testbins"
)

// network/config/default renders with kustomize and installs with plain kubectl into a real apiserver.
func TestManifestsInstallWithKubectl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	root := testbins.RepoRoot()
	kubectl, err := testbins.Path("kubectl")
	g.Expect(err).NotTo(HaveOccurred())

	build := exec.Command("go", "tool", "-modfile=hack/tools/go.mod", "kustomize", "build", "network/config/default")
	build.Dir = root
	rendered, err := build.Output()
	g.Expect(err).NotTo(HaveOccurred(), "kustomize build failed")

	dir := t.TempDir()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["env"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["env"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData, Token: env.Config.BearerToken}
	kc.Contexts["env"] = &clientcmdapi.Context{Cluster: "env", AuthInfo: "env"}
	kc.CurrentContext = "env"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	g.Expect(clientcmd.WriteToFile(*kc, kubeconfig)).To(Succeed())
	manifest := filepath.Join(dir, "network.yaml")
	g.Expect(os.WriteFile(manifest, rendered, 0o600)).To(Succeed())

	// The webhook configuration points at a Service with no controller behind it in this test: remove it
	// (and everything else) afterwards so the other tests keep using the in-process webhooks.
	t.Cleanup(func() {
		_ = env.Delete(context.Background(), &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "yonder-net-validating-webhook-configuration"}})
		_ = env.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "yonder-network"}})
	})
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", manifest).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring("deployment.apps/yonder-net-controller serverside-applied"))
	d := &appsv1.Deployment{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: "yonder-network", Name: "yonder-net-controller"}, d)).To(Succeed())
	g.Expect(d.Spec.Template.Spec.HostNetwork).To(BeTrue())
}
