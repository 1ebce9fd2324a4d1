package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The shape of a krew plugin manifest (krew's pkg/index types, apiVersion krew.googlecontainertools.github.com/v1alpha2).
const (
	APIVersion = "krew.googlecontainertools.github.com/v1alpha2"
	Kind       = "Plugin"
	// PluginName is what users type: `kubectl krew install yonder`, then `kubectl yonder …`.
	PluginName = "yonder"
)

// Plugin is a krew plugin manifest.
type Plugin struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        Metadata   `json:"metadata"`
	Spec            PluginSpec `json:"spec"`
}

// Metadata is the part of an object's metadata a manifest has: its name.
type Metadata struct {
	Name string `json:"name"`
}

// PluginSpec is the plugin's description and its archives.
type PluginSpec struct {
	Version          string     `json:"version,omitempty"`
	ShortDescription string     `json:"shortDescription,omitempty"`
	Description      string     `json:"description,omitempty"`
	Caveats          string     `json:"caveats,omitempty"`
	Homepage         string     `json:"homepage,omitempty"`
	Platforms        []Platform `json:"platforms,omitempty"`
}

// Platform is one archive and the os/arch it serves.
type Platform struct {
	URI      string                `json:"uri,omitempty"`
	Sha256   string                `json:"sha256,omitempty"`
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	Files    []FileOperation       `json:"files"`
	Bin      string                `json:"bin"`
}

// FileOperation copies From (a path or glob in the archive) to To (in the install directory).
type FileOperation struct {
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// archiveName is how the release names the plugin's archives: kubectl-yonder_<os>_<arch>.tar.gz.
var archiveName = regexp.MustCompile(`^kubectl-yonder_([a-z0-9]+)_([a-z0-9]+)\.tar\.gz$`)

// ArchiveName is the release file of the plugin for os/arch.
func ArchiveName(goos, goarch string) string {
	return "kubectl-yonder_" + goos + "_" + goarch + ".tar.gz"
}

// binName is the plugin's executable in the archive of os.
func binName(goos string) string {
	if goos == "windows" {
		return "kubectl-yonder.exe"
	}
	return "kubectl-yonder"
}

// Build makes the manifest of version from the release's archives, downloadable under uriPrefix: one
// platform per archive, with the archive's real sha256.
func Build(version, uriPrefix string, archives []string) (*Plugin, error) {
	p := &Plugin{
		TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
		Metadata: Metadata{Name: PluginName},
		Spec: PluginSpec{
			Version:          version,
			Homepage:         "https://github.com/yonder-dev/yonder",
			ShortDescription: "Operate Yonder's Cluster API providers: hosts, manual joins, sites, cluster trees",
			Description: `Yonder runs Kubernetes worker nodes anywhere (other clouds, on-prem racks, edge boxes behind NAT)
as Cluster API providers. This plugin registers SSH hosts with pinned host keys, prints a one-line manual
bootstrap for a host no provider manages, installs the network add-on into a workload cluster, and draws
a Cluster's sites, hosts, Machines, Nodes and tunnels as a tree with their health.`,
			Caveats: `The plugin talks to the MANAGEMENT cluster (kubectl's --kubeconfig, --context, -n …).
Shell completion of kubectl yonder: link the binary as kubectl_complete-yonder on your PATH.`,
		},
	}
	for _, a := range archives {
		m := archiveName.FindStringSubmatch(filepath.Base(a))
		if m == nil {
			return nil, fmt.Errorf("archive %s is not named kubectl-yonder_<os>_<arch>.tar.gz", a)
		}
		goos, goarch := m[1], m[2]
		sum, err := fileSHA256(a)
		if err != nil {
			return nil, err
		}
		p.Spec.Platforms = append(p.Spec.Platforms, Platform{
			URI:      uriPrefix + "/" + filepath.Base(a),
			Sha256:   sum,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"os": goos, "arch": goarch}},
			Files:    []FileOperation{{From: binName(goos), To: "."}, {From: "LICENSE", To: "."}},
			Bin:      binName(goos),
		})
	}
	sort.Slice(p.Spec.Platforms, func(i, j int) bool { return p.Spec.Platforms[i].URI < p.Spec.Platforms[j].URI })
	return p, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(filepath.Clean(path)) //nolint:gosec // an archive the release build names
	if err != nil {
		return "", fmt.Errorf("failed to read archive %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("failed to read archive %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// archiveFiles lists the regular files of a .tar.gz with their modes.
func archiveFiles(path string) (map[string]os.FileMode, error) {
	f, err := os.Open(filepath.Clean(path)) //nolint:gosec // an archive the release build names
	if err != nil {
		return nil, fmt.Errorf("failed to open archive %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("archive %s is not gzip: %w", path, err)
	}
	files := map[string]os.FileMode{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read archive %s: %w", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			files[filepath.Clean(h.Name)] = h.FileInfo().Mode()
		}
	}
}
