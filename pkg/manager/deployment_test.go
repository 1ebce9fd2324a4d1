package manager_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/yonder-dev/yonder/pkg/manager"
)

// Every provider's Deployment declares the ports its manager listens on by default — the webhook server,
// the probes and the HTTPS metrics — by name, so a Service, a PodMonitor or a plain Prometheus scrape
// job can name the "metrics" port without reading the manager's flags.
func TestProviderDeploymentsDeclareTheManagersPorts(t *testing.T) {
	o := &manager.Options{}
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	o.AddFlags(fs)
	g := NewWithT(t)
	g.Expect(fs.Parse(nil)).To(Succeed())
	want := map[string]int32{"webhook-server": int32(o.WebhookPort)}
	for name, addr := range map[string]string{"healthz": o.HealthAddr, "metrics": o.MetricsBindAddr} {
		_, port, err := net.SplitHostPort(addr)
		g.Expect(err).NotTo(HaveOccurred())
		p, err := strconv.ParseInt(port, 10, 32)
		g.Expect(err).NotTo(HaveOccurred())
		want[name] = int32(p)
	}
	for _, provider := range []string{"bootstrap", "controlplane", "infrastructure-ssh", "infrastructure-baremetal"} {
		t.Run(provider, func(t *testing.T) {
			g := NewWithT(t)
			raw, err := os.ReadFile(filepath.Join("..", "..", provider, "config", "manager", "manager.yaml"))
			g.Expect(err).NotTo(HaveOccurred())
			d := &appsv1.Deployment{}
			g.Expect(yaml.Unmarshal(raw, d)).To(Succeed())
			g.Expect(d.Spec.Template.Spec.Containers).To(HaveLen(1))
			got := map[string]int32{}
			for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
				g.Expect(p.Protocol).To(Or(BeEmpty(), Equal(corev1.ProtocolTCP)))
				got[p.Name] = p.ContainerPort
			}
			g.Expect(got).To(Equal(want))
		})
	}
}
