package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/atomicfile"
	"github.com/yonder-dev/yonder/pkg/hostprep"
)

func (r *run) host(ctx context.Context) (string, error) {
	if err := r.recordNetwork(); err != nil {
		return "", withHint(err, "reset restores the network namespace from this record; run the agent as root")
	}
	bridged, err := r.enableBridgeNetfilter(ctx)
	if err != nil {
		return "", withHint(err, "load br_netfilter on the host (modprobe br_netfilter), or use a kernel built with it, as kubeadm's install guide asks")
	}
	if len(bridged) > 0 {
		r.log.Info("Set the node namespace's bridge netfilter sysctls (originals saved for reset)", "sysctls", bridged)
	}
	changed, orig, err := r.o.sysctlRegistry().Acquire(r.o.baseMachine, hostprep.KubeletSysctls)
	r.st.Sysctls = orig
	if serr := r.store.Save(r.st); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return "", withHint(err, "the kubelet needs these sysctls set on the host; run the agent as root outside a read-only /proc/sys")
	}
	if len(changed) > 0 {
		r.log.Info("Set host sysctls (originals saved for reset)", "sysctls", changed)
	}
	// Files and pre-commands run once per bootstrap of this node (commands are not assumed idempotent).
	if prev := r.st.Phases[PhaseHost]; prev != nil && prev.Inputs == "files-done" {
		return "files-done", nil
	}
	for _, f := range r.cfg.Files {
		if err := writeHostFile(f); err != nil {
			return "", withHint(err, "fix files[] in the AgentConfig")
		}
	}
	for i, c := range r.cfg.PreCommands {
		out, err := exec.CommandContext(ctx, "/bin/sh", "-c", c).CombinedOutput()
		if err != nil {
			return "", withHint(fmt.Errorf("preCommands[%d] failed: %s: %w", i, tail(out), err), "fix the command; it runs again on the next bootstrap")
		}
	}
	return "files-done", nil
}

func writeHostFile(f agentv1.File) error {
	content := []byte(f.Content)
	if f.Encoding == "base64" {
		var err error
		if content, err = decodeBase64(f.Content); err != nil {
			return err
		}
	}
	mode := os.FileMode(0o644)
	if f.Permissions != "" {
		var m uint32
		if _, err := fmt.Sscanf(f.Permissions, "%o", &m); err != nil {
			return fmt.Errorf("file %s: bad permissions %q", f.Path, f.Permissions)
		}
		mode = os.FileMode(m)
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil { //nolint:gosec // operator-requested path
		return err
	}
	// Written beside the target (created 0600), given its owner and mode, then renamed into place: the
	// content is never readable under a wider mode, not even when the file exists with one.
	tmp, err := atomicfile.Create(f.Path)
	if err != nil {
		return err
	}
	defer tmp.Abort()
	if _, err := tmp.Write(content); err != nil {
		return fmt.Errorf("failed to write %s: %w", f.Path, err)
	}
	if f.Owner != "" && f.Owner != "root:root" && f.Owner != "root" {
		// Before the mode: chown clears set-id bits.
		if out, err := exec.Command("chown", f.Owner, tmp.Name()).CombinedOutput(); err != nil {
			return fmt.Errorf("failed to chown %s to %s: %s: %w", f.Path, f.Owner, tail(out), err)
		}
	}
	return tmp.Commit(mode)
}
