package render

import (
	"testing"

	. "github.com/onsi/gomega"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

// containerd gets one hosts.toml for the registry (CA, credentials) and one per mirrored upstream that
// pulls through it; none without a registry. The config points containerd at that directory.
func TestRegistryHosts(t *testing.T) {
	g := NewWithT(t)
	g.Expect(RegistryHosts(nil)).To(BeEmpty())
	hosts := RegistryHosts(&agentv1.Registry{Host: "10.0.0.1:5000", CACertificate: "-----BEGIN CERTIFICATE-----", Username: "u", Password: "p",
		MirrorOf: []string{"ghcr.io", "docker.io"}})
	g.Expect(hosts).To(HaveLen(3))
	own := hosts["/etc/containerd/certs.d/10.0.0.1:5000/hosts.toml"]
	g.Expect(own).To(ContainSubstring(`server = "https://10.0.0.1:5000"`))
	g.Expect(own).To(ContainSubstring(`[host."https://10.0.0.1:5000"]`))
	g.Expect(own).To(ContainSubstring(`ca = "/etc/yonder/registry-ca.crt"`))
	g.Expect(own).To(ContainSubstring(`Authorization = ["Basic dTpw"]`))
	g.Expect(hosts["/etc/containerd/certs.d/ghcr.io/hosts.toml"]).To(ContainSubstring(`server = "https://ghcr.io"`))
	g.Expect(hosts["/etc/containerd/certs.d/ghcr.io/hosts.toml"]).To(ContainSubstring(`[host."https://10.0.0.1:5000"]`))
	g.Expect(hosts["/etc/containerd/certs.d/docker.io/hosts.toml"]).To(ContainSubstring(`server = "https://registry-1.docker.io"`))
	anon := RegistryHosts(&agentv1.Registry{Host: "r.example"})["/etc/containerd/certs.d/r.example/hosts.toml"]
	g.Expect(anon).NotTo(ContainSubstring("ca ="))
	g.Expect(anon).NotTo(ContainSubstring("Authorization"))
	g.Expect(ContainerdTOML(Input{SandboxImage: DefaultSandboxImage})).To(ContainSubstring(`config_path = "/etc/containerd/certs.d"`))
}
