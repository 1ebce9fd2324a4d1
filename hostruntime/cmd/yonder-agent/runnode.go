package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/pkg/atomicfile"
	"github.com/yonder-dev/yonder/pkg/cloudconfig"
)

// runNodeOptions are where the diskless run puts what the instructions carry.
type runNodeOptions struct {
	// ProviderIDFile receives the meta data's providerid: the agent reads it there when the AgentConfig
	// names none (the bare-metal provider knows the providerID only once it chose the host).
	ProviderIDFile string
	// ScriptPath is where the user data, turned into a shell script, is written (0700) and run from.
	ScriptPath string
	// SetHostname sets the ramdisk's hostname to the meta data's hostname (or local-hostname).
	SetHostname bool
	// SysRoot is where sysfs is mounted (the interfaces the network data names by MAC); ResolvConf is where
	// the network data's DNS servers are written.
	SysRoot, ResolvConf string
}

// runNode carries out ActionRunNode, the diskless deploy method: the ramdisk itself does what cloud-init
// does for a disk image — providerID and hostname from the meta data, the network data's static addresses,
// routes and DNS servers, then the user data's write_files and
// runcmd, which install the digest-pinned agent and run `yonder-agent bootstrap` (the Node then lives in
// this memory). Only Yonder's cloud-config subset runs: other bootstrap data (kubeadm's) needs a disk
// image, and is refused here, before anything ran. The commands' output goes to out.
func runNode(ctx context.Context, in *attest.Instructions, o runNodeOptions, out io.Writer) (attest.Report, error) {
	rep := attest.Report{}
	script, err := cloudconfig.Script("Yonder diskless node: the bootstrap data of this host's Machine, run by its ramdisk.", in.UserData)
	if err != nil {
		return rep, fmt.Errorf("the diskless method runs Yonder's bootstrap data (write_files and runcmd only), and this user data is not: %w", err)
	}
	var md struct {
		ProviderID    string `json:"providerid"`
		Hostname      string `json:"hostname"`
		LocalHostname string `json:"local-hostname"`
	}
	if len(in.MetaData) > 0 {
		if err := json.Unmarshal(in.MetaData, &md); err != nil {
			return rep, fmt.Errorf("the instructions' meta data is not a JSON object: %w", err)
		}
	}
	if md.ProviderID != "" {
		if err := os.MkdirAll(filepath.Dir(o.ProviderIDFile), 0o755); err != nil { //nolint:gosec // /etc/yonder, world-readable as on any host
			return rep, err
		}
		if err := atomicfile.Write(o.ProviderIDFile, []byte(md.ProviderID+"\n"), 0o644); err != nil {
			return rep, fmt.Errorf("failed to write the providerID: %w", err)
		}
	}
	// cloud-init's ConfigDrive datasource takes "hostname" (an inventory record's metaData may set it),
	// else "local-hostname".
	if h := cmp.Or(md.Hostname, md.LocalHostname); h != "" && o.SetHostname {
		if err := syscall.Sethostname([]byte(h)); err != nil {
			return rep, fmt.Errorf("failed to set the hostname %q: %w", h, err)
		}
		_, _ = fmt.Fprintf(out, "diskless: hostname %s\n", h)
	}
	if len(in.NetworkData) > 0 && string(in.NetworkData) != "null" {
		if err := applyNetwork(ctx, in.NetworkData, o, out); err != nil {
			return rep, err
		}
	}
	// The script holds the bootstrap token: private to root, as cloud-init keeps its user data.
	if err := os.MkdirAll(filepath.Dir(o.ScriptPath), 0o700); err != nil {
		return rep, err
	}
	if err := atomicfile.Write(o.ScriptPath, script, 0o700); err != nil {
		return rep, fmt.Errorf("failed to write the bootstrap script: %w", err)
	}
	tail := &tailWriter{max: 2048}
	cmd := exec.CommandContext(ctx, "/bin/sh", o.ScriptPath)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(out, tail), io.MultiWriter(out, tail)
	if err := cmd.Run(); err != nil {
		// The last lines say which phase failed (the agent's PhaseError): what an operator needs, on the
		// host's condition. They are the agent's log lines, which never carry the token.
		return rep, fmt.Errorf("the bootstrap data failed (%w): %s", err, strings.TrimSpace(tail.String()))
	}
	rep.Message = "diskless: the bootstrap data ran; the agent and the Node run from memory"
	if md.ProviderID != "" {
		rep.Message += " as " + md.ProviderID
	}
	return rep, nil
}

// applyNetwork applies the host's network data (its inventory record's networkData) as cloud-init would
// on a disk image: static addresses and routes on the interfaces named by MAC, and the DNS servers.
func applyNetwork(ctx context.Context, raw []byte, o runNodeOptions, out io.Writer) error {
	ifaces, err := interfacesByMAC(o.SysRoot)
	if err != nil {
		return err
	}
	plan, err := planNetwork(raw, ifaces)
	if err != nil {
		return fmt.Errorf("the host's network data: %w", err)
	}
	for i, argv := range plan.Commands {
		if b, err := exec.CommandContext(ctx, "ip", argv...).CombinedOutput(); err != nil {
			return fmt.Errorf("the host's network data: %s: ip %s: %s: %w", plan.Said[i], strings.Join(argv, " "), strings.TrimSpace(string(b)), err)
		}
		_, _ = fmt.Fprintf(out, "diskless: network: %s\n", plan.Said[i])
	}
	if len(plan.Nameservers) > 0 {
		var b strings.Builder
		for _, ns := range plan.Nameservers {
			b.WriteString("nameserver " + ns + "\n")
		}
		if err := atomicfile.Write(o.ResolvConf, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("failed to write %s: %w", o.ResolvConf, err)
		}
		_, _ = fmt.Fprintf(out, "diskless: network: nameservers %s\n", strings.Join(plan.Nameservers, " "))
	}
	return nil
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	s := string(t.buf)
	// The cut may fall inside a line: start at the next whole one.
	if len(t.buf) == t.max {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return s
}
