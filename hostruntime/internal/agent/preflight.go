package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/yonder-dev/yonder/hostruntime/internal/preflight"
)

// Artifact names with a meaning (docs/agent.md). Names starting with ImagePrefix are OCI image archives
// imported into containerd's k8s.io namespace.
var binaryArtifacts = map[string]bool{"kubelet": true, "containerd": true, "containerd-shim-runc-v2": true, "ctr": true, "runc": true, "kubectl": true}

const (
	// ImagePrefix marks OCI image archive artifacts ("image/pause").
	ImagePrefix = "image/"
	// CNIPluginsArtifact is a tar.gz of CNI plugin binaries, unpacked into /opt/cni/bin.
	CNIPluginsArtifact = "cni-plugins"
)

var requiredArtifacts = []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr"}

func (r *run) preflight(_ context.Context) (string, error) {
	in := preflight.Input{StateDir: r.o.StateDir, MinFreeBytes: 2 << 30, Tools: []string{"systemd-nspawn", "tar", "nsenter"}, BridgeNetfilter: true}
	if r.nspawnConfig().Running() == 0 {
		in.Ports = []int{10250} // the kubelet's; ours once the machine runs
	}
	if r.cfg.Rootfs.Archive == nil && r.cfg.Rootfs.Image == "" {
		in.Tools = append(in.Tools, "debootstrap", "zstd")
	}
	rep := preflight.Run(in)
	for _, c := range rep.Checks {
		if c.Severity != preflight.OK {
			r.log.Warn("Preflight", "check", c.Name, "severity", c.Severity, "message", c.Message, "fix", c.Fix)
		}
	}
	var errs []error
	if err := rep.Err(); err != nil {
		errs = append(errs, err)
	}
	have := map[string]bool{}
	for _, a := range r.cfg.Artifacts {
		have[a.Name] = true
		if !binaryArtifacts[a.Name] && a.Name != CNIPluginsArtifact && !strings.HasPrefix(a.Name, ImagePrefix) {
			errs = append(errs, fmt.Errorf("artifact %q has no meaning: name binaries kubelet, containerd, containerd-shim-runc-v2, ctr, runc, kubectl, the CNI plugins tarball %q, or images %q<name>", a.Name, CNIPluginsArtifact, ImagePrefix))
		}
	}
	// A node image carries the binaries; an archive or the default rootfs needs them as artifacts.
	for _, n := range requiredArtifacts {
		if !have[n] && r.cfg.Rootfs.Image == "" {
			errs = append(errs, fmt.Errorf("artifact %q is missing from the AgentConfig (or set rootfs.image to a node image, which carries it)", n))
		}
	}
	if len(errs) > 0 {
		return "", withHint(errors.Join(errs...), "fix the host or the AgentConfig as each line says, then run bootstrap again (`yonder-agent preflight` prints the full report)")
	}
	return "", nil
}
