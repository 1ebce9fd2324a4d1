package yonderconfig_test

import (
	"context"
	"encoding/json"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/registry"
)

// The Machine's Kubernetes version selects the node image: with spec.images pointing at a real registry
// (TLS with a private CA, htpasswd) through the Secrets an operator creates, the data pins
// <repository>/yonder-node@<digest of the version's tag> and carries the registry's CA, credentials and
// mirrors; a version the registry lacks leaves no data and says NodeImageUnavailable with what to do.
func TestTheMachineVersionSelectsTheNodeImage(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	reg, err := registry.Start(ctx, registry.Options{Dir: t.TempDir(), Users: map[string]string{"ci": "pw"}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = reg.Stop() })
	img, err := ociimage.Build(ociimage.Image{Files: []ociimage.File{{Path: "etc/yonder-node", Content: []byte(controlPlaneVersion)}}})
	g.Expect(err).NotTo(HaveOccurred())
	digest, err := reg.Push(ctx, reg.Host+"/mirror/yonder/yonder-node:"+controlPlaneVersion, img)
	g.Expect(err).NotTo(HaveOccurred())

	cluster := newCluster(ctx, t, g, "ycfg-images")
	dockerConfig, err := json.Marshal(map[string]any{"auths": map[string]any{reg.Host: map[string]string{"username": "ci", "password": "pw"}}})
	g.Expect(err).NotTo(HaveOccurred())
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "regcred"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "registry-ca"}, Data: map[string][]byte{"ca.crt": reg.CACertPEM}},
	} {
		g.Expect(env.Create(ctx, s)).To(Succeed())
	}
	images := bootstrapv1.Images{Repository: reg.Host + "/mirror/yonder", PullSecretName: "regcred", CASecretName: "registry-ca", MirrorOf: []string{"ghcr.io"}}

	newMachine(ctx, g, cluster, "current", bootstrapv1.YonderConfigSpec{Images: images}, nil)
	ac := agentConfigOf(g, dataSecret(ctx, g, cluster.Namespace, "current"))
	g.Expect(ac.KubernetesVersion).To(Equal(controlPlaneVersion))
	g.Expect(ac.Rootfs.Image).To(Equal(reg.Host + "/mirror/yonder/yonder-node@" + digest.String()))
	g.Expect(ac.Registry).NotTo(BeNil())
	g.Expect(ac.Registry.Host).To(Equal(reg.Host))
	g.Expect(ac.Registry.CACertificate).To(Equal(string(reg.CACertPEM)))
	g.Expect([]string{ac.Registry.Username, ac.Registry.Password}).To(Equal([]string{"ci", "pw"}))
	g.Expect(ac.Registry.MirrorOf).To(Equal([]string{"ghcr.io"}))

	newMachine(ctx, g, cluster, "missing", bootstrapv1.YonderConfigSpec{Version: "v1.99.0", Images: images}, nil)
	g.Eventually(func(g Gomega) {
		c := getConfig(ctx, g, cluster.Namespace, "missing")
		cond := conditions.Get(c, bootstrapv1.YonderConfigDataSecretAvailableCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(bootstrapv1.YonderConfigNodeImageUnavailableReason))
		g.Expect(cond.Message).To(ContainSubstring("yonder-node:v1.99.0 is not in the registry: push it"))
	}).Should(Succeed())
	err = env.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: "missing"}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no data Secret without the image: %v", err)

	newMachine(ctx, g, cluster, "no-secret", bootstrapv1.YonderConfigSpec{Images: bootstrapv1.Images{Repository: images.Repository, CASecretName: "nope"}}, nil)
	g.Eventually(func(g Gomega) {
		c := getConfig(ctx, g, cluster.Namespace, "no-secret")
		g.Expect(conditions.GetMessage(c, bootstrapv1.YonderConfigDataSecretAvailableCondition)).To(ContainSubstring("Secret " + cluster.Namespace + "/nope does not exist"))
	}).Should(Succeed())
}
