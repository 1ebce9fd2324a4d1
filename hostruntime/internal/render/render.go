// Package render produces the files that go inside the nspawn machine: containerd's config, the kubelet's
// configuration and bootstrap kubeconfig, the CNI network, and the systemd units that start everything
// when the machine boots. Rendering is pure (no I/O) so that a re-run can compare and leave unchanged
// files untouched.
package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/hostprep"
)

// Paths inside the machine.
const (
	BinDir          = "/usr/local/bin"
	CNIBinDirDebian = "/usr/lib/cni"
	CNIBinDirOpt    = "/opt/cni/bin"
	CNIConfDir      = "/etc/cni/net.d"
	CNIConfFile     = CNIConfDir + "/10-yonder.conflist"
	// CNIBridge is the bridge of the CNI network, in the node's network namespace (reset removes it).
	CNIBridge               = "cni0"
	ContainerdConfig        = "/etc/containerd/config.toml"
	ContainerdSocket        = "/run/containerd/containerd.sock"
	KubeletConfig           = "/var/lib/kubelet/config.yaml"
	KubeletKubeconfig       = "/etc/kubernetes/kubelet.conf"
	KubeletBootstrapConfig  = "/etc/kubernetes/bootstrap-kubelet.conf"
	KubeletEnvFile          = "/etc/yonder/kubelet.env"
	KubeletCertDir          = "/var/lib/kubelet/pki"
	KubeletClientCert       = KubeletCertDir + "/kubelet-client-current.pem"
	CAFile                  = "/etc/kubernetes/pki/ca.crt"
	ImagesDir               = "/var/lib/yonder/images"
	LogDir                  = "/var/log/yonder"
	UnitDir                 = "/etc/systemd/system"
	WantsDir                = UnitDir + "/multi-user.target.wants"
	DefaultSandboxImage     = "registry.k8s.io/pause:3.10"
	DefaultClusterDNS       = "10.96.0.10"
	DefaultClusterDomain    = "cluster.local"
	NodeLeaseDurationSecond = 40
)

// Input is everything rendering depends on.
type Input struct {
	Config *agentv1.AgentConfig
	// ProviderID is the resolved provider ID (AgentConfig or /etc/yonder/provider-id).
	ProviderID string
	// Labels are the Node labels (AgentConfig labels merged with detected ones, e.g. GPU).
	Labels map[string]string
	// SandboxImage is the pause image the CRI uses; it must be imported under exactly this name.
	SandboxImage string
	// CNIBinDirs lists where CNI plugins are.
	CNIBinDirs []string
	// NVIDIARuntime adds the nvidia runtime to containerd when the toolkit is in the machine.
	NVIDIARuntime bool
	// NodeIP is the address the Node registers (kubelet --node-ip); empty lets the kubelet choose.
	NodeIP string
	// NodeLeaseDurationSeconds tunes how fast the Node goes NotReady (default 40, kubelet's default).
	NodeLeaseDurationSeconds int
}

// ContainerdTOML renders containerd 2.x's config (version 3).
func ContainerdTOML(in Input) string {
	bins := make([]string, 0, len(in.CNIBinDirs))
	for _, d := range in.CNIBinDirs {
		bins = append(bins, fmt.Sprintf("%q", d))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by yonder-agent; changes are overwritten.
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = %q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".registry]
    # Registry CAs, credentials and mirrors (AgentConfig registry): one hosts.toml per registry.
    config_path = %q
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  # The machine has no CAP_SYS_RESOURCE to lower oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%s]
    conf_dir = %q
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
`, ContainerdSocket, ContainerdHostsDir, in.SandboxImage, strings.Join(bins, ", "), CNIConfDir)
	if in.NVIDIARuntime {
		b.WriteString(`    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
        SystemdCgroup = false
`)
	}
	return b.String()
}

// KubeletConfigYAML renders the KubeletConfiguration. The knobs are those a kubelet inside an nspawn
// machine on a cgroup v1 host needs (docs/agent.md): cgroupfs driver, cgroup v1 allowed, swap tolerated,
// tiny eviction thresholds (the machine shares the host's disk), certificate rotation.
func KubeletConfigYAML(in Input) (string, error) {
	lease := in.NodeLeaseDurationSeconds
	if lease == 0 {
		lease = NodeLeaseDurationSecond
	}
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"cgroupDriver":             "cgroupfs",
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"containerRuntimeEndpoint": "unix://" + ContainerdSocket,
		"rotateCertificates":       true,
		"serverTLSBootstrap":       false,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": CAFile},
		},
		"authorization":               map[string]any{"mode": "Webhook"},
		"clusterDNS":                  []string{DefaultClusterDNS},
		"clusterDomain":               DefaultClusterDomain,
		"resolvConf":                  "/etc/resolv.conf",
		"evictionHard":                map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"nodeLeaseDurationSeconds":    lease,
		"registerNode":                true,
	}
	if in.ProviderID != "" {
		cfg["providerID"] = in.ProviderID
	}
	if len(in.Config.Taints) > 0 {
		taints := make([]map[string]string, 0, len(in.Config.Taints))
		for _, t := range in.Config.Taints {
			m := map[string]string{"key": t.Key, "effect": t.Effect}
			if t.Value != "" {
				m["value"] = t.Value
			}
			taints = append(taints, m)
		}
		cfg["registerWithTaints"] = taints
	}
	// JSON is YAML; it keeps the output deterministic (sorted keys) without another dependency.
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	return string(b) + "\n", nil
}

// Kubeconfig renders a kubeconfig for the kubelet: with a token (bootstrap) or with the rotated client
// certificate file (after TLS bootstrap).
func Kubeconfig(endpoint, token, certFile string) string {
	user := fmt.Sprintf("    client-certificate: %s\n    client-key: %s\n", certFile, certFile)
	if token != "" {
		user = fmt.Sprintf("    token: %s\n", token)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: default
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: default
  user:
%scontexts:
- name: default
  context:
    cluster: default
    user: default
current-context: default
`, endpoint, CAFile, user)
}

// KubeletArgs is the kubelet command line (everything not expressible in the config file).
func KubeletArgs(in Input) []string {
	args := []string{
		"--config=" + KubeletConfig,
		"--bootstrap-kubeconfig=" + KubeletBootstrapConfig,
		"--kubeconfig=" + KubeletKubeconfig,
		"--cert-dir=" + KubeletCertDir,
		"--hostname-override=" + in.Config.NodeName,
	}
	if in.NodeIP != "" {
		args = append(args, "--node-ip="+in.NodeIP)
	}
	if len(in.Labels) > 0 {
		keys := make([]string, 0, len(in.Labels))
		for k := range in.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		pairs := make([]string, 0, len(keys))
		for _, k := range keys {
			pairs = append(pairs, k+"="+in.Labels[k])
		}
		args = append(args, "--node-labels="+strings.Join(pairs, ","))
	}
	for _, a := range in.Config.KubeletExtraArgs {
		args = append(args, "--"+a.Name+"="+a.Value)
	}
	return args
}

// CNIConflist renders a bridge + host-local network for the Node's pod CIDR: the Node's pod network until
// the network add-on replaces it with its own (network/internal/dataplane/daemon.WriteCNIConfig).
//
// Traffic from a pod to anything outside the Node's pod CIDR is masqueraded to the Node's address (the
// bridge plugin's ipMasq). Nothing outside the Node routes a Yonder Node's pod CIDR back to it — not the
// cluster's control plane, its DNS pods on other Nodes, a registry or the internet — so without it a pod
// could talk to no one but its neighbours: no API server, no Service DNS, no egress at all. The add-on's
// configuration drops the masquerade, because the add-on routes pod addresses between Nodes and sites
// itself and masquerades only traffic that leaves the cluster.
func CNIConflist(podCIDR string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "yonder",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
`, CNIBridge, podCIDR)
}

// Units are the systemd units (name → content) that bring the node up inside the machine, in order:
// yonder-prep (cgroup controllers rw, /dev/kmsg), containerd, yonder-images (import OCI archives), kubelet.
func Units() map[string]string {
	prep := `[Unit]
Description=Yonder: prepare the machine for containerd and kubelet
DefaultDependencies=no
After=local-fs.target
Before=containerd.service

[Service]
Type=oneshot
RemainAfterExit=yes
# nspawn mounts the cgroup v1 controllers read-only; the kubelet and runc need them writable.
ExecStart=/bin/sh -c '` + hostprep.MachinePrepCommand + `; mkdir -p /lib/modules ` + LogDir + `'

[Install]
WantedBy=multi-user.target
`
	containerd := `[Unit]
Description=containerd (Yonder)
After=yonder-prep.service
Requires=yonder-prep.service

[Service]
Type=notify
ExecStart=` + BinDir + `/containerd --config ` + ContainerdConfig + `
Delegate=yes
KillMode=process
Restart=always
RestartSec=1
LimitNOFILE=1048576
StandardOutput=append:` + LogDir + `/containerd.log
StandardError=inherit

[Install]
WantedBy=multi-user.target
`
	images := `[Unit]
Description=Yonder: import OCI image archives into containerd
After=containerd.service
Requires=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for f in ` + ImagesDir + `/*.tar; do [ -e "$f" ] || continue; ` + BinDir + `/ctr -n k8s.io images import --local "$f" || exit 1; done'
StandardOutput=append:` + LogDir + `/images.log
StandardError=inherit

[Install]
WantedBy=multi-user.target
`
	kubelet := `[Unit]
Description=kubelet (Yonder)
After=containerd.service yonder-images.service
Requires=containerd.service
Wants=yonder-images.service

[Service]
EnvironmentFile=` + KubeletEnvFile + `
ExecStart=` + BinDir + `/kubelet $KUBELET_ARGS
Restart=always
RestartSec=1
StandardOutput=append:` + LogDir + `/kubelet.log
StandardError=inherit

[Install]
WantedBy=multi-user.target
`
	return map[string]string{
		"yonder-prep.service":   prep,
		"containerd.service":    containerd,
		"yonder-images.service": images,
		"kubelet.service":       kubelet,
	}
}

// KubeletEnv renders the environment file holding the kubelet's arguments.
func KubeletEnv(in Input) string {
	var b bytes.Buffer
	b.WriteString("# Written by yonder-agent; changes are overwritten.\nKUBELET_ARGS=")
	for i, a := range KubeletArgs(in) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a)
	}
	b.WriteByte('\n')
	return b.String()
}
