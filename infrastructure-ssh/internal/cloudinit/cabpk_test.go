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
)

// cabpkDisks renders a worker's join data with CABPK's own renderer (sigs.k8s.io/cluster-api v1.14.2,
// bootstrap/kubeadm/pkg/cloudinit), with the disk keys a KubeadmConfig's spec may add for disk. The rest of
// what CABPK renders (bootcmd, files, users, pre and post commands around the real kubeadm join) runs on
// full-OS hosts in test/e2e TestSeparateClusters/KubeadmWorkersOnSSHHosts, and is compared with real cloud-init in
// TestCABPKWorkerMatchesRealCloudInit.
func cabpkDisks(t *testing.T, dir, disk string) []byte {
	t.Helper()
	in := &cabpk.NodeInput{
		BaseUserData: cabpk.BaseUserData{
			NTP: &bootstrapv1.NTP{Enabled: ptr.To(true), Servers: []string{"time.example"}},
			DiskSetup: &bootstrapv1.DiskSetup{
				Partitions: []bootstrapv1.Partition{{Device: disk, TableType: "gpt", DiskLayout: []bootstrapv1.PartitionSpec{
					{Percentage: 60, PartitionType: bootstrapv1.PartitionTypeLinux}, {Percentage: 40, PartitionType: bootstrapv1.PartitionTypeLinuxSwap},
				}}},
				Filesystems: []bootstrapv1.Filesystem{
					{Device: disk, Partition: "1", Filesystem: "ext4", Label: "ycidata", ExtraOpts: []string{"-E", "lazy_itable_init=1"}},
					{Device: disk, Partition: "2", Filesystem: "swap", Label: "yciswap"},
				},
			},
			Mounts: []bootstrapv1.MountPoints{{"LABEL=ycidata", dir + "/data"}},
		},
		JoinConfiguration: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration:\n  name: {{ ds.meta_data.local_hostname }}\n",
	}
	data, err := cabpk.NewNode(in)
	if err != nil {
		t.Fatalf("CABPK cannot render: %v", err)
	}
	return data
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

	data := cabpkDisks(t, dir, loop)
	g.Expect(string(data)).To(ContainSubstring("\ndisk_setup:\n"))
	g.Expect(string(data)).To(ContainSubstring("\nfs_setup:\n"))
	g.Expect(string(data)).To(ContainSubstring("\nmounts:\n"))
	cfg, err := cloudinit.Parse(data, cloudinit.Options{Hostname: h.Name})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.NTP).NotTo(BeNil())
	g.Expect(cfg.RunCmd).To(ContainElement(ContainSubstring("kubeadm join")))
	// Only the disk keys run here: this host has no time client (TestNTPWithoutATimeClientFailsOnARealHost)
	// and no control plane to join.
	disksOnly := *cfg
	disksOnly.NTP, disksOnly.RunCmd = nil, nil
	code, log := runOnHost(t, e, "disk-1", disksOnly.Script())
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

	code, log = runOnHost(t, e, "disk-2", disksOnly.Script())
	g.Expect(code).To(Equal(0), log)
	g.Expect(log).To(ContainSubstring("already holds data"))
	check()
	_, err = h.Output(ctx, "test -f "+dir+"/data/kept")
	g.Expect(err).NotTo(HaveOccurred(), "the filesystem was not formatted again")
}
