package osimage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cloudInitConfig limits cloud-init to the config drive: with its default list it would try a dozen
// datasources, some of them over the network (EC2, GCE, OpenStack's metadata service), each costing
// timeouts on a host that has none. None keeps cloud-init's modules running without a drive.
// The networkd renderer: the image configures its network with systemd-networkd, not ifupdown. The locale
// is the one the image has: C.UTF-8 is built into libc, while cloud-init's default (en_US.UTF-8) needs the
// locales package, and its locale module would fail and leave cloud-init's status "error".
const cloudInitConfig = `# Written by Yonder's test/osimage: the bare-metal provider's hosts get a config-2 drive.
datasource_list: [ ConfigDrive, None ]
locale: C.UTF-8
system_info:
  network:
    renderers: [ networkd ]
`

// dhcpNetwork leases an address on every wired NIC when cloud-init wrote no configuration of its own
// (its 10-cloud-init-*.network files sort before this one and win for the NICs they name).
const dhcpNetwork = `[Match]
Type=ether
Name=en* eth*

[Network]
DHCP=yes
`

// resolvConf replaces the resolv.conf debootstrap copies from the machine that builds the image: that
// machine's nameserver means nothing on a host, and where the host has a default route its queries time
// out instead of failing at once — the kubelet's first registration then outlasted its CSINode
// initialization (30 s), which leaves the Node NotReady for good. Without a nameserver, lookups go to the
// host's own port 53 and fail at once; a site's image gets its resolver from its network configuration.
const resolvConf = "# Written by Yonder's test/osimage: no nameserver of the machine that built the image.\n"

// maskedUnits do nothing useful on a short-lived test host and cost boot time under emulation: periodic
// maintenance timers, a getty for a VGA console the VM does not have, the pstore and e2scrub services.
var maskedUnits = []string{
	"apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer", "e2scrub_reap.service",
	"fstrim.timer", "getty@tty1.service", "systemd-pstore.service",
}

// enabledUnits are systemd-networkd's units, linked as `systemctl enable systemd-networkd` would.
var enabledUnits = map[string]string{
	"multi-user.target.wants/systemd-networkd.service":                 "systemd-networkd.service",
	"sockets.target.wants/systemd-networkd.socket":                     "systemd-networkd.socket",
	"network-online.target.wants/systemd-networkd-wait-online.service": "systemd-networkd-wait-online.service",
}

// bootFiles are the kernel and initramfs paths inside the root filesystem.
type bootFiles struct{ kernel, initrd string }

// imageFiles are the files configure writes into the tree, by path relative to its root.
func imageFiles(o Options, uuid string, boot bootFiles) map[string]string {
	args := strings.TrimSpace("root=UUID=" + uuid + " ro console=ttyS0,115200 " + o.KernelArgs)
	return map[string]string{
		"etc/fstab":                           "UUID=" + uuid + " / ext4 defaults,noatime,errors=remount-ro 0 1\n",
		"etc/hostname":                        "debian\n",
		"etc/resolv.conf":                     resolvConf,
		"etc/hosts":                           "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/cloud/cloud.cfg.d/90_yonder.cfg": cloudInitConfig,
		"etc/systemd/network/90-dhcp.network": dhcpNetwork,
		"etc/machine-id":                      "", // generated at first boot: every host its own
		"boot/extlinux/extlinux.conf":         "SERIAL 0 115200\nDEFAULT debian\nPROMPT 0\nTIMEOUT 0\nLABEL debian\n  LINUX " + boot.kernel + "\n  INITRD " + boot.initrd + "\n  APPEND " + args + "\n",
		"etc/systemd/journald.conf.d/90.conf": "[Journal]\n# The serial console shows the boot; the journal stays in memory.\nStorage=volatile\n",
		"etc/apt/apt.conf.d/90-no-recommends": "APT::Install-Recommends \"false\";\n",
	}
}

// configure turns the debootstrapped tree into a cloud image: the files above, networkd enabled, the
// units masked, no root password, no machine-id, no downloaded package files.
func configure(root string, o Options, uuid string) error {
	boot, err := findBootFiles(root)
	if err != nil {
		return err
	}
	for name, content := range imageFiles(o, uuid, boot) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // directories of the image
			return err
		}
		_ = os.Remove(p)                                                // a symlink must not redirect the write out of the tree
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil { //nolint:gosec // the image's configuration
			return fmt.Errorf("failed to write %s into the image: %w", name, err)
		}
	}
	for link, unit := range enabledUnits {
		if err := symlink(filepath.Join("/lib/systemd/system", unit), filepath.Join(root, "etc/systemd/system", link)); err != nil {
			return err
		}
	}
	for _, unit := range maskedUnits {
		if err := symlink("/dev/null", filepath.Join(root, "etc/systemd/system", unit)); err != nil {
			return err
		}
	}
	if err := lockRoot(root); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(root, "var/lib/dbus/machine-id"))
	for _, pattern := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*", "var/log/*.log", "debootstrap"} {
		matches, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return fmt.Errorf("failed to trim the image: %w", err)
			}
		}
	}
	return nil
}

// findBootFiles names the one kernel and initramfs linux-image-amd64 installed, as paths from the root.
func findBootFiles(root string) (bootFiles, error) {
	kernels := bootGlob(root, "vmlinuz-*")
	initrds := bootGlob(root, "initrd.img-*")
	if len(kernels) != 1 || len(initrds) != 1 {
		return bootFiles{}, fmt.Errorf("the image's /boot holds %d kernels and %d initramfs images, expected one of each", len(kernels), len(initrds))
	}
	return bootFiles{kernel: "/boot/" + filepath.Base(kernels[0]), initrd: "/boot/" + filepath.Base(initrds[0])}, nil
}

// bootGlob lists /boot's files matching pattern, without the copies update-initramfs leaves while it works.
func bootGlob(root, pattern string) []string {
	matches, _ := filepath.Glob(filepath.Join(root, "boot", pattern))
	var out []string
	for _, m := range matches {
		if !strings.HasSuffix(m, ".dpkg-bak") && !strings.HasSuffix(m, ".new") {
			out = append(out, m)
		}
	}
	return out
}

func symlink(target, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil { //nolint:gosec // directories of the image
		return err
	}
	_ = os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		return fmt.Errorf("failed to link %s in the image: %w", link, err)
	}
	return nil
}

// lockRoot makes sure root has no password: "*" in /etc/shadow (debootstrap leaves it so; this checks).
func lockRoot(root string) error {
	p := filepath.Join(root, "etc", "shadow")
	b, err := os.ReadFile(p) //nolint:gosec // the image's shadow file
	if err != nil {
		return fmt.Errorf("failed to read the image's /etc/shadow: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	found := false
	for i, l := range lines {
		fields := strings.Split(l, ":")
		if len(fields) > 2 && fields[0] == "root" {
			fields[1] = "*"
			lines[i] = strings.Join(fields, ":")
			found = true
		}
	}
	if !found {
		return errors.New("the image's /etc/shadow has no root entry")
	}
	return os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o640) //nolint:gosec // the image's shadow file
}
