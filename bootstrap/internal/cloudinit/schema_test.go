package cloudinit

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/osimage"
	"github.com/yonder-dev/yonder/test/testpki"
)

// What Render produces is valid for real cloud-init, the consumer of every CAPI infrastructure provider
// that hands bootstrap data to a cloud image (CAPA, CAPZ, CAPO, CAPV, Metal3's config drive): the cloud
// image's own cloud-init (Debian bookworm's 22.4, test/osimage) checks each variant with its schema.
func TestRenderedDataPassesCloudInitsSchema(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	img, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	ca, err := testpki.NewCA("workload-ca", 0)
	g.Expect(err).NotTo(HaveOccurred())
	cfg := &agentv1.AgentConfig{
		NodeName:          "worker-0",
		KubernetesVersion: "v1.36.3",
		APIServer:         agentv1.APIServer{Endpoint: "https://10.0.0.1:6443", CACertificate: string(ca.CertPEM)},
		BootstrapToken:    "abcdef.0123456789abcdef",
		Labels:            map[string]string{"yonder.dev/site": "edge"},
		Site:              "edge",
		GPU:               agentv1.GPU{Mode: agentv1.GPUModeAuto},
		PreCommands:       []string{"echo 'quoted: yes' > /tmp/pre"},
	}
	digest := strings.Repeat("ab", 32)
	for name, src := range map[string]AgentSource{
		"url":                      {URL: "https://registry.example/v2/yonder/agent/blobs/sha256:" + digest, SHA256: digest},
		"url with CA and password": {URL: "https://registry.example/v2/yonder/agent/blobs/sha256:" + digest, SHA256: digest, CACertificate: string(ca.CertPEM), Username: "robot", Password: "p'w:\"x"},
		"offline bundle":           {Path: "/opt/bundle/yonder-agent", SHA256: digest},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			data, err := Render(cfg, src)
			g.Expect(err).NotTo(HaveOccurred())
			out, err := img.CloudInitSchema(ctx, data)
			g.Expect(err).NotTo(HaveOccurred(), "%s", data)
			g.Expect(out).To(ContainSubstring("Valid cloud-config"))
		})
	}
}
