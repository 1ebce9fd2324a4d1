package cloudinit_test

import (
	"context"
	"os"
	"os/exec"
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
func cabpkNode(t *testing.T, dir, disk string) []byte {
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
	if disk != "" {
		in.NTP = &bootstrapv1.NTP{Enabled: ptr.To(true), Servers: []string{"time.example"}}
		in.DiskSetup = &bootstrapv1.DiskSetup{
			Partitions: []bootstrapv1.Partition{{Device: disk, TableType: "gpt", DiskLayout: []bootstrapv1.PartitionSpec{
				{Percentage: 60, PartitionType: bootstrapv1.PartitionTypeLinux}, {Percentage: 40, PartitionType: bootstrapv1.PartitionTypeLinuxSwap},
			}}},
			Filesystems: []bootstrapv1.Filesystem{
				{Device: disk, Partition: "1", Filesystem: "ext4", Label: "ycidata", ExtraOpts: []string{"-E", "lazy_itable_init=1"}},
				{Device: disk, Partition: "2", Filesystem: "swap", Label: "yciswap"},
			},
		}
		in.Mounts = []bootstrapv1.MountPoints{{"LABEL=ycidata", dir + "/data"}}
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
	data := cabpkNode(t, dir, "")
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

// CABPK's diskSetup, filesystems and mounts run on a real host against a loop device: a gpt table with
// the layout's shares, ext4 with its label and extra options, swap, an fstab line marked as cloud-init
// marks it, the filesystem mounted (in the host's mount namespace). Run again, nothing is partitioned
// or formatted again (a file written meanwhile survives) and fstab is unchanged. (The ntp CABPK adds
// is parsed; this host has no time client, which TestNTPWithoutATimeClientFailsOnARealHost covers.)
func TestCABPKDisksAndMountsOnARealHost(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, e, dir := hostWithPrivateEtc(t, "cidisk")
	g.Expect(os.WriteFile(filepath.Join(dir, "disk.img"), nil, 0o600)).To(Succeed())
	g.Expect(os.Truncate(filepath.Join(dir, "disk.img"), 64<<20)).To(Succeed())
	out, err := exec.Command("losetup", "--find", "--partscan", "--show", filepath.Join(dir, "disk.img")).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		// The mount lives in the host's namespace: undo it there, then free the loop device.
		_, _ = h.Output(context.Background(), "umount "+dir+"/data")
		if out, err := exec.Command("losetup", "--detach", loop).CombinedOutput(); err != nil {
			t.Errorf("failed to detach %s: %v: %s", loop, err, out)
		}
	})

	data := cabpkNode(t, dir, loop)
	g.Expect(string(data)).To(ContainSubstring("\ndisk_setup:\n"))
	g.Expect(string(data)).To(ContainSubstring("\nfs_setup:\n"))
	g.Expect(string(data)).To(ContainSubstring("\nmounts:\n"))
	cfg, err := cloudinit.Parse(data, cloudinit.Options{Hostname: h.Name})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.NTP).NotTo(BeNil())
	withoutNTP := *cfg
	withoutNTP.NTP = nil
	code, log := runOnHost(t, e, "disk-1", withoutNTP.Script())
	g.Expect(code).To(Equal(0), log)

	check := func() {
		out, err := h.Output(ctx, "sfdisk --dump "+loop+" | grep -E '^(label:|"+loop+")'; blkid -o value -s LABEL "+loop+"p1 "+loop+"p2; "+
			"findmnt -n -o SOURCE,FSTYPE "+dir+"/data; grep -c cloudconfig /etc/fstab; grep cloudconfig /etc/fstab")
		g.Expect(err).NotTo(HaveOccurred(), out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		g.Expect(lines).To(HaveLen(8), out)
		g.Expect(lines[0]).To(Equal("label: gpt"))
		g.Expect(lines[1]).To(MatchRegexp(`^`+loop+`p1 : start=\s*2048, size=\s*78643, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4`), "60% of the 131072 sectors, Linux")
		g.Expect(lines[2]).To(MatchRegexp(`^`+loop+`p2 : .*type=0657FD6D-A4AB-43C4-84E5-0933C84B4F4F`), "the rest, Linux swap")
		g.Expect(lines[3:5]).To(Equal([]string{"ycidata", "yciswap"}))
		g.Expect(lines[5]).To(Equal(loop + "p1 ext4"))
		g.Expect(lines[6]).To(Equal("1"))
		g.Expect(lines[7]).To(Equal("LABEL=ycidata\t" + dir + "/data\tauto\tdefaults,nofail,comment=cloudconfig\t0\t2"))
	}
	check()
	// In the host: the filesystem is mounted in its mount namespace only.
	kept, err := h.Output(ctx, "echo x > "+dir+"/data/kept && umount "+dir+"/data")
	g.Expect(err).NotTo(HaveOccurred(), kept)

	code, log = runOnHost(t, e, "disk-2", withoutNTP.Script())
	g.Expect(code).To(Equal(0), log)
	g.Expect(log).To(ContainSubstring("already holds data"))
	check()
	_, err = h.Output(ctx, "test -f "+dir+"/data/kept")
	g.Expect(err).NotTo(HaveOccurred(), "the filesystem was not formatted again")
}
