package cloudinit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	cabpk "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"

	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/cloudinit"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/remote"
)

// cabpkKubeadm stands in for kubeadm on the host (a real kubeadm join needs a full-OS node runtime and
// a control plane): it checks that the join configuration CABPK's data wrote is there, rendered for
// this host, and that bootcmd ran before it.
const cabpkKubeadm = `#!/bin/sh
[ "$1" = join ] || { echo "unexpected kubeadm $*" >&2; exit 2; }
grep -q "name: $(hostname)\$" /run/kubeadm/kubeadm-join-config.yaml || { echo "join config not rendered for $(hostname)" >&2; exit 3; }
grep -q booted "$BOOTED" || { echo "bootcmd did not run first" >&2; exit 4; }
`

// cabpkNode renders a worker's join data with CABPK's own renderer (sigs.k8s.io/cluster-api v1.14.2,
// bootstrap/kubeadm/pkg/cloudinit), with what a KubeadmConfig's spec may add.
func cabpkNode(t *testing.T, dir string, disks bool) []byte {
	t.Helper()
	in := &cabpk.NodeInput{
		BaseUserData: cabpk.BaseUserData{
			BootCommands: []string{"echo booted > " + dir + "/booted"},
			PreKubeadmCommands: []string{
				"export BOOTED=" + dir + "/booted", "install -m 0755 " + dir + "/kubeadm /usr/local/bin/kubeadm",
			},
			PostKubeadmCommands: []string{"echo post >> " + dir + "/post"},
			AdditionalFiles: []bootstrapv1.File{
				{Path: dir + "/etc/app.conf", Owner: "root:root", Permissions: "0600", Content: "key: value\n"},
				{Path: dir + "/etc/app.conf", Content: "more: 1\n", Append: ptr.To(true)},
				{Path: dir + "/kubeadm", Permissions: "0755", Content: cabpkKubeadm},
			},
			Users: []bootstrapv1.User{{
				Name: "yci-capi", Gecos: "CAPI operator", Groups: "yci-capiops", HomeDir: dir + "/home/yci-capi", Shell: "/bin/sh",
				Inactive: ptr.To(false), LockPassword: ptr.To(true), Sudo: "ALL=(ALL) NOPASSWD:ALL",
				SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests capi@example"},
			}},
		},
		JoinConfiguration: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration:\n  name: {{ ds.meta_data.local_hostname }}\n",
	}
	if disks {
		in.NTP = &bootstrapv1.NTP{Enabled: ptr.To(true), Servers: []string{"time.example"}}
		in.DiskSetup = &bootstrapv1.DiskSetup{
			Partitions:  []bootstrapv1.Partition{{Device: "/dev/sdb", Layout: ptr.To(true), TableType: "gpt"}},
			Filesystems: []bootstrapv1.Filesystem{{Device: "/dev/sdb1", Filesystem: "ext4", Label: "data"}},
		}
		in.Mounts = []bootstrapv1.MountPoints{{"LABEL=data", "/var/lib/data"}}
	}
	data, err := cabpk.NewNode(in)
	if err != nil {
		t.Fatalf("CABPK cannot render: %v", err)
	}
	return data
}

// The cloud-config CABPK itself renders (jinja header, bootcmd, write_files, users, runcmd with the
// sentinel) runs on a real host over SSH as cloud-init would run it: bootcmd first, files, the user
// with its groups, sudo rule and key, kubeadm join, the sentinel, the post commands.
func TestCABPKJoinDataRunsOnARealHost(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, e, dir := hostWithPrivateEtc(t, "cicabpk")
	data := cabpkNode(t, dir, false)
	g.Expect(string(data)).To(HavePrefix("## template: jinja\n#cloud-config\n"))
	g.Expect(string(data)).To(ContainSubstring("\nbootcmd:\n"))
	g.Expect(string(data)).To(ContainSubstring("\nusers:\n"))

	cfg, err := cloudinit.Parse(data, cloudinit.Options{Hostname: h.Name})
	g.Expect(err).NotTo(HaveOccurred())
	code, log := runOnHost(t, e, "cabpk-1", cfg.Script())
	g.Expect(code).To(Equal(0), log)
	st, err := remote.State(ctx, e, "cabpk-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Sentinel).To(BeTrue(), "CABPK's runcmd wrote the sentinel after kubeadm join")

	conf, err := os.ReadFile(filepath.Join(dir, "etc/app.conf"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(conf)).To(Equal("key: value\nmore: 1\n"))
	post, err := os.ReadFile(filepath.Join(dir, "post"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(post)).To(Equal("post\n"))
	out, err := h.Output(ctx, "id -nG yci-capi; getent passwd yci-capi | cut -d: -f5-; getent shadow yci-capi | cut -c1-10; cat "+dir+"/home/yci-capi/.ssh/authorized_keys; grep yci-capi "+cloudinit.SudoersFile)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(strings.Split(strings.TrimSpace(out), "\n")).To(Equal([]string{
		"yci-capi yci-capiops", "CAPI operator:" + dir + "/home/yci-capi:/bin/sh", "yci-capi:!",
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests capi@example",
		"# User rules for yci-capi", "yci-capi ALL=(ALL) NOPASSWD:ALL",
	}))
}

// With diskSetup, mounts and ntp, CABPK's data still parses; every key this executor refuses is named.
func TestCABPKDataWithDisksNamesWhatIsRefused(t *testing.T) {
	g := NewWithT(t)
	_, err := cloudinit.Parse(cabpkNode(t, t.TempDir(), true), cloudinit.Options{Hostname: "h"})
	var u *cloudinit.UnsupportedError
	g.Expect(errors.As(err, &u)).To(BeTrue(), "%v", err)
	g.Expect(u.Items).To(Equal([]string{"key disk_setup", "key fs_setup", "key mounts"}))
}
