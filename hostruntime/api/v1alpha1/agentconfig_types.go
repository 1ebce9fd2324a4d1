// Package v1alpha1 defines the AgentConfig file format (hostruntime.yonder.dev/v1alpha1): what
// yonder-agent needs to turn a Linux host into a Node. The bootstrap provider renders it into the bootstrap
// data; the agent reads it with Decode, which is strict (unknown fields are errors) and validates every
// field, reporting field paths.
package v1alpha1

// Group and version of the file format.
const (
	Group   = "hostruntime.yonder.dev"
	Version = "v1alpha1"
	// APIVersion is the apiVersion every AgentConfig file carries.
	APIVersion = Group + "/" + Version
	// Kind is the kind every AgentConfig file carries.
	Kind = "AgentConfig"
	// DefaultPath is where the bootstrap data writes the file on a host.
	DefaultPath = "/etc/yonder/agent-config.yaml"
	// SysctlRegistryDir is where the nodes on one kernel coordinate its global sysctls (the agent's
	// default): whatever shares the kernel must share this directory.
	SysctlRegistryDir = "/run/yonder/sysctls"
)

// AgentConfig is the whole configuration of one host's yonder-agent.
type AgentConfig struct {
	// APIVersion must be hostruntime.yonder.dev/v1alpha1.
	APIVersion string `json:"apiVersion"`
	// Kind must be AgentConfig.
	Kind string `json:"kind"`

	// NodeName is the Node's name (a DNS-1123 subdomain); by default the Machine's name.
	NodeName string `json:"nodeName"`
	// ProviderID is set on the Node (kubelet --provider-id). Empty when the infrastructure provider only
	// knows it after choosing a host; the agent then reads it from /etc/yonder/provider-id.
	ProviderID string `json:"providerID,omitempty"`
	// KubernetesVersion is the kubelet version to run (vMAJOR.MINOR.PATCH).
	KubernetesVersion string `json:"kubernetesVersion"`
	// APIServer is the control plane the node joins.
	APIServer APIServer `json:"apiServer"`
	// BootstrapToken is the bootstrap token ("<id>.<secret>") the kubelet TLS-bootstraps with. It is a
	// credential: the file is written 0600 and the agent never logs it.
	BootstrapToken string `json:"bootstrapToken"`

	// Labels are set on the Node at registration (kubelet --node-labels).
	Labels map[string]string `json:"labels,omitempty"`
	// Taints are set on the Node at registration (kubelet --register-with-taints).
	Taints []Taint `json:"taints,omitempty"`
	// KubeletExtraArgs are appended to the kubelet command line, in order.
	KubeletExtraArgs []Arg `json:"kubeletExtraArgs,omitempty"`

	// Site is the network site the node belongs to (network.yonder.dev Site name); empty means none.
	Site string `json:"site,omitempty"`

	// Rootfs is the node's root filesystem (the systemd-nspawn machine).
	Rootfs Rootfs `json:"rootfs,omitempty"`
	// Registry is how the agent reaches the registry of rootfs.image, and what the node's containerd is
	// told about it (CA, credentials, the upstream registries it mirrors).
	Registry *Registry `json:"registry,omitempty"`
	// Artifacts are files the agent fetches and verifies before use (containerd, kubelet, CNI plugins…).
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// GPU selects GPU handling.
	GPU GPU `json:"gpu,omitempty"`

	// Files are written on the host before PreCommands run.
	Files []File `json:"files,omitempty"`
	// PreCommands run (with /bin/sh -c) before the agent prepares the host; a failure stops the bootstrap.
	PreCommands []string `json:"preCommands,omitempty"`
	// PostCommands run after the node's kubelet started.
	PostCommands []string `json:"postCommands,omitempty"`
}

// APIServer is where the node reaches the control plane.
type APIServer struct {
	// Endpoint is the https URL of the API server.
	Endpoint string `json:"endpoint"`
	// CACertificate is the PEM bundle the agent and kubelet trust for the API server.
	CACertificate string `json:"caCertificate"`
}

// Taint is a Node taint.
type Taint struct {
	// Key of the taint (a qualified name).
	Key string `json:"key"`
	// Value of the taint (a label value, may be empty).
	Value string `json:"value,omitempty"`
	// Effect: NoSchedule, PreferNoSchedule or NoExecute.
	Effect string `json:"effect"`
}

// Arg is one command line flag; Name is without leading dashes.
type Arg struct {
	// Name of the flag, e.g. "max-pods".
	Name string `json:"name"`
	// Value of the flag.
	Value string `json:"value"`
}

// Rootfs selects the node's root filesystem. At most one of Image and Archive; neither means the agent's
// built-in default (debootstrap from the host's configured mirror).
type Rootfs struct {
	// Image is a node image (an OCI image of the whole root filesystem with containerd, runc, CNI plugins
	// and the kubelet of KubernetesVersion), pinned by digest: <registry>/<repository>@sha256:<digest>.
	// The binaries come from the image; artifacts may still add to them.
	Image string `json:"image,omitempty"`
	// Archive is a tar archive (optionally zstd-compressed) fetched and verified like any artifact.
	Archive *Artifact `json:"archive,omitempty"`
}

// Registry describes one OCI registry.
type Registry struct {
	// Host is the registry's host[:port], as in image references.
	Host string `json:"host"`
	// CACertificate is a PEM bundle trusted for the registry's TLS certificate besides the system roots.
	CACertificate string `json:"caCertificate,omitempty"`
	// Username and Password authenticate to the registry (a credential: never logged).
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// MirrorOf are upstream registries (e.g. ghcr.io, registry.k8s.io) whose images the node's containerd
	// pulls from Host instead, under the same repository paths: what an air-gapped site's mirror serves.
	MirrorOf []string `json:"mirrorOf,omitempty"`
}

// Artifact is a file fetched from URL or taken from a local Path, and verified against SHA256 before use.
type Artifact struct {
	// Name identifies the artifact (unique in the list), e.g. "kubelet".
	Name string `json:"name"`
	// URL to download from (http or https). Exactly one of URL and Path.
	URL string `json:"url,omitempty"`
	// Path of a local copy (offline/air-gapped installs). Exactly one of URL and Path.
	Path string `json:"path,omitempty"`
	// SHA256 is the hex digest the content must have.
	SHA256 string `json:"sha256"`
}

// GPUMode selects GPU handling.
type GPUMode string

// GPU modes.
const (
	// GPUModeNone ignores GPUs.
	GPUModeNone GPUMode = "None"
	// GPUModeAuto detects NVIDIA and AMD GPUs, labels the Node and binds the devices.
	GPUModeAuto GPUMode = "Auto"
	// GPUModeNVIDIA requires NVIDIA GPUs (the bootstrap fails without one).
	GPUModeNVIDIA GPUMode = "NVIDIA"
	// GPUModeAMD requires AMD GPUs (the bootstrap fails without one).
	GPUModeAMD GPUMode = "AMD"
)

// GPU configures GPU handling.
type GPU struct {
	// Mode: None (default), Auto, NVIDIA or AMD.
	Mode GPUMode `json:"mode,omitempty"`
}

// File is a file written on the host.
type File struct {
	// Path is absolute.
	Path string `json:"path"`
	// Content of the file, encoded as Encoding says.
	Content string `json:"content"`
	// Encoding of Content: "" (plain) or "base64".
	Encoding string `json:"encoding,omitempty"`
	// Permissions in octal, e.g. "0644" (default "0644").
	Permissions string `json:"permissions,omitempty"`
	// Owner as "user:group" (default "root:root").
	Owner string `json:"owner,omitempty"`
}
