// Package disk is the host side of the bare-metal image step, run by the attested provisioning ramdisk
// (busybox and the static yonder-agent: no udev, no lsblk, no qemu-img, no wipefs there) and by an operator
// by hand: it lists the host's disks from sysfs, picks the root disk by Metal3's rootDeviceHints, writes an
// image (raw or qcow2, checksum verified while it is downloaded) and wipes disk metadata for the
// `metadata` cleaning mode.
package disk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
)

const (
	// DefaultSysRoot is where sysfs is mounted.
	DefaultSysRoot = "/sys"
	// DefaultDevRoot is where device nodes (and /dev/disk/by-* links, when udev made them) live.
	DefaultDevRoot = "/dev"
	// minGuessedRootBytes is Ironic's floor when no hint is given: the smallest disk of at least 4 GiB.
	minGuessedRootBytes = 4 << 30
)

// Device is one whole disk as sysfs describes it. The identifiers are the ones rootDeviceHints name.
type Device struct {
	Name               string `json:"name"`
	Path               string `json:"path"`
	SizeBytes          int64  `json:"sizeBytes"`
	Model              string `json:"model,omitempty"`
	Vendor             string `json:"vendor,omitempty"`
	SerialNumber       string `json:"serialNumber,omitempty"`
	WWN                string `json:"wwn,omitempty"`
	WWNWithExtension   string `json:"wwnWithExtension,omitempty"`
	WWNVendorExtension string `json:"wwnVendorExtension,omitempty"`
	HCTL               string `json:"hctl,omitempty"`
	Rotational         bool   `json:"rotational"`
}

// Excluded is a block device that can never be the root disk, with the reason.
type Excluded struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// ListOptions say where sysfs and /dev are and whether loop devices count as disks.
type ListOptions struct {
	// SysRoot defaults to /sys; tests point it at a fixture tree.
	SysRoot string
	// DevRoot defaults to /dev; Device.Path and deviceName hints are resolved under it.
	DevRoot string
	// IncludeLoop makes attached loop devices candidates: tests (and a rehearsal by hand) write to them.
	// Never in the ramdisk: a loop device there is the ramdisk's own image.
	IncludeLoop bool
}

func (o ListOptions) sysRoot() string {
	if o.SysRoot == "" {
		return DefaultSysRoot
	}
	return o.SysRoot
}

func (o ListOptions) devRoot() string {
	if o.DevRoot == "" {
		return DefaultDevRoot
	}
	return o.DevRoot
}

// Inventory is every block device the kernel lists, split into candidates and excluded ones.
type Inventory struct {
	Devices  []Device   `json:"devices"`
	Excluded []Excluded `json:"excluded,omitempty"`
	devRoot  string
}

// excludedPrefixes are kernel block devices that are never a disk to install to: RAM disks and zram (the
// ramdisk's own memory), device-mapper and md (built on top of the real disks, which are listed
// themselves), optical drives, floppies and network block devices.
var excludedPrefixes = []struct{ prefix, reason string }{
	{"ram", "RAM disk"},
	{"zram", "compressed RAM disk"},
	{"dm-", "device-mapper device (its underlying disks are listed themselves)"},
	{"md", "software RAID device (its member disks are listed themselves)"},
	{"sr", "optical drive"},
	{"fd", "floppy drive"},
	{"nbd", "network block device"},
}

// List reads /sys/block. Devices come sorted by size, then name: the order Choose picks in.
func List(opts ListOptions) (*Inventory, error) {
	blockDir := filepath.Join(opts.sysRoot(), "block")
	entries, err := os.ReadDir(blockDir)
	if err != nil {
		return nil, fmt.Errorf("failed to list block devices in %s: %w", blockDir, err)
	}
	inv := &Inventory{devRoot: opts.devRoot()}
	for _, e := range entries {
		name := e.Name()
		if reason := excludedByName(name, opts.IncludeLoop); reason != "" {
			inv.Excluded = append(inv.Excluded, Excluded{Name: name, Reason: reason})
			continue
		}
		d, reason, err := readDevice(filepath.Join(blockDir, name), name, opts.devRoot())
		if err != nil {
			return nil, err
		}
		if reason != "" {
			inv.Excluded = append(inv.Excluded, Excluded{Name: name, Reason: reason})
			continue
		}
		inv.Devices = append(inv.Devices, d)
	}
	sort.Slice(inv.Devices, func(i, j int) bool {
		if inv.Devices[i].SizeBytes != inv.Devices[j].SizeBytes {
			return inv.Devices[i].SizeBytes < inv.Devices[j].SizeBytes
		}
		return inv.Devices[i].Name < inv.Devices[j].Name
	})
	return inv, nil
}

func excludedByName(name string, includeLoop bool) string {
	if strings.HasPrefix(name, "loop") {
		if includeLoop {
			return ""
		}
		return "loop device (only with --include-loop)"
	}
	for _, p := range excludedPrefixes {
		if strings.HasPrefix(name, p.prefix) {
			return p.reason
		}
	}
	return ""
}

var hctlPattern = regexp.MustCompile(`^\d+:\d+:\d+:\d+$`)

// readDevice returns the device, or a reason it is no candidate (read-only, removable, empty).
func readDevice(dir, name, devRoot string) (Device, string, error) {
	sectors, err := readInt(filepath.Join(dir, "size"))
	if err != nil {
		return Device{}, "", fmt.Errorf("failed to read the size of block device %s: %w", name, err)
	}
	d := Device{Name: name, Path: filepath.Join(devRoot, name), SizeBytes: sectors * 512}
	switch {
	case d.SizeBytes == 0:
		return d, "no medium (size 0)", nil
	case readAttr(dir, "ro") == "1":
		return d, "read-only", nil
	case readAttr(dir, "removable") == "1":
		// Virtual media, USB sticks and card readers: installing there is almost never what an operator
		// means, and the provisioning ISO itself may be one. Ironic skips them as well by default.
		return d, "removable", nil
	}
	d.Model = readAttr(dir, "device/model")
	d.Vendor = readAttr(dir, "device/vendor")
	d.SerialNumber = firstAttr(dir, "serial", "device/serial")
	if d.SerialNumber == "" {
		d.SerialNumber = vpdSerial(filepath.Join(dir, "device/vpd_pg80"))
	}
	d.Rotational = readAttr(dir, "queue/rotational") == "1"
	if target, err := os.Readlink(filepath.Join(dir, "device")); err == nil && hctlPattern.MatchString(filepath.Base(target)) {
		d.HCTL = filepath.Base(target)
	}
	if wwid := firstAttr(dir, "wwid", "device/wwid"); strings.HasPrefix(name, "nvme") {
		// udev sets an NVMe namespace's ID_WWN to the kernel's wwid as it is ("eui.…", "nvme.…") and
		// no extension; Ironic matches the hint against that.
		d.WWN = wwid
	} else {
		d.WWN, d.WWNWithExtension, d.WWNVendorExtension = wwnFromWWID(wwid)
	}
	return d, "", nil
}

// wwnFromWWID derives what udev's scsi_id reports as ID_WWN, ID_WWN_WITH_EXTENSION and
// ID_WWN_VENDOR_EXTENSION (which Ironic matches the hints against) from a SCSI disk's wwid: an NAA
// identifier "naa.<hex>" gives 0x<first 16 hex digits>, a 32-digit (NAA type 6) one also the vendor
// extension 0x<last 16>; an EUI-64 "eui.<hex>" gives 0x<hex>. A t10 vendor string (ATA disks) has no WWN.
func wwnFromWWID(wwid string) (wwn, withExt, vendorExt string) {
	kind, hex, ok := strings.Cut(strings.ToLower(strings.TrimSpace(wwid)), ".")
	if !ok || hex == "" {
		return "", "", ""
	}
	switch kind {
	case "naa":
		if len(hex) > 16 {
			return "0x" + hex[:16], "0x" + hex, "0x" + hex[16:]
		}
		return "0x" + hex, "0x" + hex, ""
	case "eui":
		return "0x" + hex, "0x" + hex, ""
	}
	return "", "", ""
}

// vpdSerial reads a SCSI unit serial number VPD page: 4 header bytes, then the serial.
func vpdSerial(path string) string {
	b, err := os.ReadFile(path) //nolint:gosec // sysfs attribute under the chosen root
	if err != nil || len(b) <= 4 {
		return ""
	}
	return strings.TrimSpace(strings.Trim(string(b[4:]), "\x00"))
}

func readAttr(dir, rel string) string {
	b, err := os.ReadFile(filepath.Join(dir, rel)) //nolint:gosec // sysfs attribute under the chosen root
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func firstAttr(dir string, rels ...string) string {
	for _, rel := range rels {
		if v := readAttr(dir, rel); v != "" {
			return v
		}
	}
	return ""
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path) //nolint:gosec // sysfs attribute under the chosen root
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// ErrNoRootDevice is wrapped by Choose's error when no disk matches.
var ErrNoRootDevice = errors.New("no disk matches the root device hints")

// Choose picks the root disk the way Ironic does. Every given hint must match: deviceName exactly (a
// /dev/disk/by-* link is resolved to its device), hctl, serialNumber and the wwn* hints exactly, model and
// vendor as substrings, minSizeGigabytes as GiB (Ironic's unit) rounded down, rotational by value. Among
// several matches the smallest disk wins (then the first name): without hints that is Ironic's own rule
// (smallest disk of at least 4 GiB); with hints Ironic takes the first match in lsblk's order, which is not
// stable across boots, so Yonder keeps the size order there too — it never picks a large data disk when a
// smaller one matches. The error lists every disk and why it was rejected, for the operator's condition.
func (inv *Inventory) Choose(h *metal3v1.RootDeviceHints) (Device, error) {
	noHints := h == nil || (*h == metal3v1.RootDeviceHints{})
	var deviceName string
	if !noHints && h.DeviceName != "" {
		var err error
		if deviceName, err = inv.resolveDeviceName(h.DeviceName); err != nil {
			return Device{}, fmt.Errorf("%w %s: %w", ErrNoRootDevice, describeHints(h), err)
		}
	}
	var why []string
	for _, d := range inv.Devices {
		var reasons []string
		if noHints {
			if d.SizeBytes < minGuessedRootBytes {
				reasons = append(reasons, fmt.Sprintf("smaller than 4 GiB (%s), the floor without rootDeviceHints", humanSize(d.SizeBytes)))
			}
		} else {
			reasons = mismatches(d, h, deviceName)
		}
		if len(reasons) == 0 {
			return d, nil
		}
		why = append(why, fmt.Sprintf("%s (%s): %s", d.Name, humanSize(d.SizeBytes), strings.Join(reasons, ", ")))
	}
	for _, e := range inv.Excluded {
		why = append(why, fmt.Sprintf("%s: excluded, %s", e.Name, e.Reason))
	}
	if len(why) == 0 {
		why = append(why, "the kernel lists no block device")
	}
	return Device{}, fmt.Errorf("%w %s: %s", ErrNoRootDevice, describeHints(h), strings.Join(why, "; "))
}

func mismatches(d Device, h *metal3v1.RootDeviceHints, deviceName string) []string {
	var r []string
	exact := func(field, hint, actual string) {
		if hint != "" && hint != actual {
			r = append(r, fmt.Sprintf("%s %q is not %q", field, actual, hint))
		}
	}
	contains := func(field, hint, actual string) {
		if hint != "" && !strings.Contains(actual, hint) {
			r = append(r, fmt.Sprintf("%s %q does not contain %q", field, actual, hint))
		}
	}
	if deviceName != "" && deviceName != d.Name {
		r = append(r, fmt.Sprintf("deviceName %s is %s", h.DeviceName, deviceName))
	}
	exact("hctl", h.HCTL, d.HCTL)
	contains("model", h.Model, d.Model)
	contains("vendor", h.Vendor, d.Vendor)
	exact("serialNumber", h.SerialNumber, d.SerialNumber)
	exact("wwn", h.WWN, d.WWN)
	exact("wwnWithExtension", h.WWNWithExtension, d.WWNWithExtension)
	exact("wwnVendorExtension", h.WWNVendorExtension, d.WWNVendorExtension)
	if h.MinSizeGigabytes > 0 && d.SizeBytes>>30 < int64(h.MinSizeGigabytes) {
		r = append(r, fmt.Sprintf("size %s is below minSizeGigabytes %d", humanSize(d.SizeBytes), h.MinSizeGigabytes))
	}
	if h.Rotational != nil && *h.Rotational != d.Rotational {
		r = append(r, fmt.Sprintf("rotational is %t", d.Rotational))
	}
	return r
}

// resolveDeviceName turns a deviceName hint into a kernel name: /dev/sda → sda, a /dev/disk/by-path (or
// any by-*) link → the device it points to. Links exist only where udev ran; the error says so.
func (inv *Inventory) resolveDeviceName(hint string) (string, error) {
	const devPrefix = "/dev/"
	if !strings.HasPrefix(hint, devPrefix) {
		return "", fmt.Errorf("deviceName %q is not a /dev path", hint)
	}
	rel := strings.TrimPrefix(hint, devPrefix)
	if !strings.Contains(rel, "/") {
		return rel, nil
	}
	// Follow the links by hand: the device node they end at need not exist under a test's dev root.
	p := filepath.Join(inv.devRoot, rel)
	for range 8 {
		target, err := os.Readlink(p)
		switch {
		case err == nil:
		case p != filepath.Join(inv.devRoot, rel):
			return filepath.Base(p), nil // the end of the chain
		case errors.Is(err, os.ErrNotExist):
			return "", fmt.Errorf("deviceName %s does not exist (by-* links exist only where udev runs; the provisioning ramdisk has none, use /dev/<name> or another hint there)", hint)
		default:
			return "", fmt.Errorf("deviceName %s is not a link to a device: %w", hint, err)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	return "", fmt.Errorf("deviceName %s: too many levels of links", hint)
}

func describeHints(h *metal3v1.RootDeviceHints) string {
	if h == nil || (*h == metal3v1.RootDeviceHints{}) {
		return "(no rootDeviceHints: the smallest disk of at least 4 GiB)"
	}
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", k, v))
		}
	}
	add("deviceName", h.DeviceName)
	add("hctl", h.HCTL)
	add("model", h.Model)
	add("vendor", h.Vendor)
	add("serialNumber", h.SerialNumber)
	add("wwn", h.WWN)
	add("wwnWithExtension", h.WWNWithExtension)
	add("wwnVendorExtension", h.WWNVendorExtension)
	if h.MinSizeGigabytes > 0 {
		parts = append(parts, fmt.Sprintf("minSizeGigabytes=%d", h.MinSizeGigabytes))
	}
	if h.Rotational != nil {
		parts = append(parts, fmt.Sprintf("rotational=%t", *h.Rotational))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func humanSize(b int64) string {
	switch {
	case b >= 1<<40:
		return fmt.Sprintf("%.1f TiB", float64(b)/(1<<40))
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", b)
}
