package render

import (
	"encoding/base64"
	"fmt"
	"path"
	"strings"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

// Registry configuration inside the machine (containerd's hosts directory).
const (
	// ContainerdHostsDir is containerd's registry hosts directory (config_path).
	ContainerdHostsDir = "/etc/containerd/certs.d"
	// RegistryCAFile is the CA of AgentConfig.registry.
	RegistryCAFile = "/etc/yonder/registry-ca.crt"
)

// RegistryHosts renders containerd's hosts.toml files for the AgentConfig's registry: the registry itself
// (its CA and credentials), and every upstream registry it mirrors, pulled from the registry under the same
// repository paths (the upstream stays the fallback). Keys are paths inside the machine.
func RegistryHosts(reg *agentv1.Registry) map[string]string {
	if reg == nil {
		return nil
	}
	host := hostEntry(reg)
	out := map[string]string{
		path.Join(ContainerdHostsDir, reg.Host, "hosts.toml"): fmt.Sprintf("# Written by yonder-agent.\nserver = %q\n\n%s", "https://"+reg.Host, host),
	}
	for _, m := range reg.MirrorOf {
		out[path.Join(ContainerdHostsDir, m, "hosts.toml")] = fmt.Sprintf("# Written by yonder-agent: %s is mirrored by %s.\nserver = %q\n\n%s", m, reg.Host, "https://"+upstream(m), host)
	}
	return out
}

// upstream is the registry API host of a registry name (Docker Hub's images live at registry-1).
func upstream(name string) string {
	if name == "docker.io" {
		return "registry-1.docker.io"
	}
	return name
}

func hostEntry(reg *agentv1.Registry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "https://"+reg.Host)
	if reg.CACertificate != "" {
		fmt.Fprintf(&b, "  ca = %q\n", RegistryCAFile)
	}
	if reg.Username != "" {
		auth := base64.StdEncoding.EncodeToString([]byte(reg.Username + ":" + reg.Password))
		fmt.Fprintf(&b, "  [host.%q.header]\n    Authorization = [%q]\n", "https://"+reg.Host, "Basic "+auth)
	}
	return b.String()
}
