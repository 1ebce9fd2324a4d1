package cloudinit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// Malformed disk_setup, fs_setup and mounts entries are refused with the entry and key named; nothing
// that could end an fstab line or reach the shell unquoted is accepted.
func TestParseRejectsBadDisks(t *testing.T) {
	for name, tc := range map[string]struct {
		data string
		want string
	}{
		"device with command":   {"#cloud-config\ndisk_setup:\n  '/dev/sdb;reboot': {layout: true}\n", `disk_setup[/dev/sdb;reboot]: "/dev/sdb;reboot" is neither a /dev path`},
		"device outside /dev":   {"#cloud-config\nfs_setup: [{device: /etc/passwd, filesystem: ext4}]\n", `fs_setup[0]: device: "/etc/passwd" is neither`},
		"table type":            {"#cloud-config\ndisk_setup: {/dev/sdb: {table_type: bsd, layout: true}}\n", "table_type bsd is neither mbr nor gpt"},
		"layout over 100":       {"#cloud-config\ndisk_setup: {/dev/sdb: {layout: [60, 50]}}\n", "the partitions take 110% of the disk"},
		"layout type":           {"#cloud-config\ndisk_setup: {/dev/sdb: {layout: [[50, '$(x)'], 50]}}\n", "$(x) is not a partition type code"},
		"gpt without alias":     {"#cloud-config\ndisk_setup: {/dev/sdb: {table_type: gpt, layout: [[50, '07'], 50]}}\n", `partition type "07" has no gpt equivalent`},
		"mbr with gpt code":     {"#cloud-config\ndisk_setup: {/dev/sdb: {layout: [[50, '8300'], 50]}}\n", `partition type "8300" is not an MBR type code`},
		"fs type":               {"#cloud-config\nfs_setup: [{device: /dev/sdb, filesystem: 'ext4 -O x'}]\n", "filesystem ext4 -O x is not a filesystem type"},
		"label with space":      {"#cloud-config\nfs_setup: [{device: /dev/sdb, filesystem: ext4, label: 'a b'}]\n", `label "a b" is not one word`},
		"partition":             {"#cloud-config\nfs_setup: [{device: /dev/sdb, filesystem: ext4, partition: '1;x'}]\n", `partition "1;x" is neither none nor a partition number`},
		"no filesystem":         {"#cloud-config\nfs_setup: [{device: /dev/sdb}]\n", "fs_setup[0]: filesystem missing"},
		"mount field newline":   {"#cloud-config\nmounts: [[\"/dev/sdb\", \"/mnt\\n/dev/sdc /x\"]]\n", `mounts[0][1]: "/mnt\n/dev/sdc /x" is not one fstab word`},
		"mount comment":         {"#cloud-config\nmounts: [[/dev/sdb, /mnt, ext4, '#x']]\n", `mounts[0][3]: "#x" is not one fstab word`},
		"mount point relative":  {"#cloud-config\nmounts: [[/dev/sdb, mnt]]\n", `mounts[0]: mount point "mnt" is not absolute`},
		"mount too many fields": {"#cloud-config\nmounts: [[a, b, c, d, e, f, g]]\n", "mounts[0]: not a list of one to six fields"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tc.data), Options{})
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			var u *UnsupportedError
			g.Expect(errors.As(err, &u)).To(BeFalse(), "malformed, not unsupported: %v", err)
		})
	}
}

// disk_setup, fs_setup and mounts parse with cloud-init's defaults: mbr, one Linux partition for
// layout true, nothing for layout false, short device names under /dev, fstab defaults (without
// cloud-init.service) and the cloudconfig marker; an entry without mount point writes nothing.
func TestParseDisks(t *testing.T) {
	g := NewWithT(t)
	cfg, err := Parse([]byte("#cloud-config\ndisk_setup:\n  sdb: {layout: true}\n  /dev/sdc: {layout: false}\n  /dev/sdd: {table_type: gpt, overwrite: true, layout: [25, [75, 82]]}\n"+
		"fs_setup:\n- {device: sdb, partition: 1, filesystem: ext4, label: data, replace_fs: ntfs}\n- {device: /dev/sdd, partition: none, filesystem: xfs, overwrite: true}\n"+
		"mounts:\n- [sdb1, /data]\n- [/dev/sdd, /x, xfs, 'defaults', '0', '0']\n- [/dev/sde, null]\n"), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Disks).To(Equal([]Disk{
		// In the order of the names as written (a mapping has none of its own).
		{Device: "/dev/sdd", TableType: "gpt", Overwrite: true, Layout: []Partition{{25, "83"}, {75, "82"}}},
		{Device: "/dev/sdb", TableType: "mbr", Layout: []Partition{{100, "83"}}},
	}))
	g.Expect(cfg.Filesystems).To(Equal([]Filesystem{
		{Device: "/dev/sdb", Partition: "1", Filesystem: "ext4", Label: "data", ReplaceFS: "ntfs"},
		{Device: "/dev/sdd", Filesystem: "xfs", Overwrite: true},
	}))
	g.Expect(cfg.Mounts).To(Equal([]Mount{
		{"/dev/sdb1", "/data", "auto", "defaults,nofail,comment=cloudconfig", "0", "2"},
		{"/dev/sdd", "/x", "xfs", "defaults,comment=cloudconfig", "0", "0"},
	}))
	script := cfg.Script()
	g.Expect(script).To(ContainSubstring("printf '%s\\n' \",$((s * 25 / 100)),L\" \",,S\" | sfdisk --quiet --wipe always --label gpt '/dev/sdd'\n"))
	g.Expect(script).To(ContainSubstring("mkfs.xfs -f \"$d\"\n"))
	msg, err := shellParses(script)
	g.Expect(err).NotTo(HaveOccurred(), msg)
}

// fs_setup with overwrite false never formats a device that holds a filesystem, unless it is the
// replace_fs type; with overwrite true it formats. Run by sh against a real loop device.
func TestFSSetupFormatsOnlyWhatItMay(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	g.Expect(os.WriteFile(img, nil, 0o600)).To(Succeed())
	g.Expect(os.Truncate(img, 16<<20)).To(Succeed())
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", loop).Run() })
	label := func() string {
		out, _ := exec.Command("blkid", "-o", "value", "-s", "LABEL", loop).Output()
		return strings.TrimSpace(string(out))
	}
	run := func(entry string) string {
		cfg, err := Parse([]byte("#cloud-config\nfs_setup:\n- {device: "+loop+", filesystem: ext4, "+entry+"}\n"), Options{})
		g.Expect(err).NotTo(HaveOccurred())
		out, err := exec.Command("sh", "-c", cfg.Script()).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		return string(out)
	}
	g.Expect(exec.Command("mkfs.ext2", "-q", "-L", "old", loop).Run()).To(Succeed())
	g.Expect(run("label: new")).To(ContainSubstring("already holds data (ext2): not formatted (overwrite is false)"))
	g.Expect(label()).To(Equal("old"))
	run("label: replaced, replace_fs: ext2")
	g.Expect(label()).To(Equal("replaced"))
	g.Expect(run("label: again, replace_fs: ext2")).To(ContainSubstring("already holds data (ext4)"))
	g.Expect(label()).To(Equal("replaced"))
	run("label: forced, overwrite: true")
	g.Expect(label()).To(Equal("forced"))
}
