// Package gpu detects GPUs from sysfs (PCI vendor, class and bound driver), the NVIDIA driver's procfs
// and device nodes, and turns them into Node labels and device binds for the nspawn machine. Roots are
// configurable so tests use synthetic trees.
package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// PCI vendor IDs.
const (
	VendorNVIDIA = "0x10de"
	VendorAMD    = "0x1002"
)

// Label keys set on the Node.
const (
	LabelPresent = "yonder.dev/gpu"
	LabelVendor  = "yonder.dev/gpu.vendor"
	LabelCount   = "yonder.dev/gpu.count"
	// LabelProduct is the GPU model as the driver names it (NVIDIA only), sanitised into a label value
	// the way NVIDIA's GPU feature discovery writes nvidia.com/gpu.product ("NVIDIA-H200"); "mixed"
	// when the node's GPUs differ.
	LabelProduct = "yonder.dev/gpu.product"
	// LabelNVIDIAPresent is the label NVIDIA's device plugin and GPU operator select nodes with.
	LabelNVIDIAPresent = "nvidia.com/gpu.present"
)

// Compute drivers: a GPU serves containers only when its vendor's driver is bound to it. One held by
// vfio-pci (kept for a VM's passthrough), by nouveau, or by no driver at all has no device node a
// container could open.
var computeDriver = map[string]string{"nvidia": "nvidia", "amd": "amdgpu"}

// Device is one GPU found on the PCI bus.
type Device struct {
	// Address is the PCI address, e.g. 0000:3b:00.0.
	Address string `json:"address"`
	// Vendor is "nvidia" or "amd".
	Vendor string `json:"vendor"`
	// DeviceID is the PCI device ID, e.g. 0x20b0.
	DeviceID string `json:"deviceID"`
	// Driver is the kernel driver bound to the device ("" when none).
	Driver string `json:"driver,omitempty"`
	// Model is the name the driver gives the GPU, e.g. "NVIDIA H200" (NVIDIA's driver only).
	Model string `json:"model,omitempty"`
}

// ComputeDriver is the kernel driver through which containers use a vendor's GPUs ("nvidia", "amdgpu").
func ComputeDriver(vendor string) string { return computeDriver[vendor] }

// BoundTo names the driver bound to the device for messages: its name, or "no driver".
func (d Device) BoundTo() string {
	if d.Driver == "" {
		return "no driver"
	}
	return d.Driver
}

// Usable reports whether containers can use the GPU: its vendor's compute driver is bound to it.
func (d Device) Usable() bool { return d.Driver != "" && d.Driver == computeDriver[d.Vendor] }

// Result is what Detect found.
type Result struct {
	// Devices are the usable GPUs: the ones the labels count and the device nodes serve.
	Devices []Device `json:"devices,omitempty"`
	// Unusable are GPUs present on the bus without their vendor's driver (see Device.Usable).
	Unusable []Device `json:"unusable,omitempty"`
	// DeviceNodes are /dev entries to bind into the machine (relative to the dev root, e.g. "nvidia0").
	DeviceNodes []string `json:"deviceNodes,omitempty"`
}

// Roots are where Detect looks (defaults /sys, /dev and /proc).
type Roots struct {
	Sys  string
	Dev  string
	Proc string
}

// Detect lists GPUs from NVIDIA and AMD (PCI class display controller 0x03xxxx or processing accelerator
// 0x12xxxx, as AMD's Instinct accelerators present themselves), splits them by whether
// their vendor's driver is bound, names NVIDIA's from the driver's /proc/driver/nvidia/gpus, and lists the
// device nodes the drivers of the usable ones created (/dev/nvidia*, /dev/nvidia-caps, /dev/kfd, /dev/dri).
func Detect(r Roots) (*Result, error) {
	if r.Sys == "" {
		r.Sys = "/sys"
	}
	if r.Dev == "" {
		r.Dev = "/dev"
	}
	if r.Proc == "" {
		r.Proc = "/proc"
	}
	res := &Result{}
	pciDir := filepath.Join(r.Sys, "bus", "pci", "devices")
	entries, err := os.ReadDir(pciDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("failed to list PCI devices in %s: %w", pciDir, err)
	}
	vendors := map[string]bool{}
	for _, e := range entries {
		dir := filepath.Join(pciDir, e.Name())
		vendor := readTrim(filepath.Join(dir, "vendor"))
		class := readTrim(filepath.Join(dir, "class"))
		// Display controllers (VGA 0x0300, 3D 0x0302, other 0x0380) and processing accelerators (0x1200).
		if !strings.HasPrefix(class, "0x03") && !strings.HasPrefix(class, "0x12") {
			continue
		}
		var name string
		switch vendor {
		case VendorNVIDIA:
			name = "nvidia"
		case VendorAMD:
			name = "amd"
		default:
			continue
		}
		d := Device{Address: e.Name(), Vendor: name, DeviceID: readTrim(filepath.Join(dir, "device")), Driver: boundDriver(dir)}
		if !d.Usable() {
			res.Unusable = append(res.Unusable, d)
			continue
		}
		if name == "nvidia" {
			d.Model = nvidiaModel(r.Proc, d.Address)
		}
		vendors[name] = true
		res.Devices = append(res.Devices, d)
	}
	sort.Slice(res.Devices, func(i, j int) bool { return res.Devices[i].Address < res.Devices[j].Address })
	sort.Slice(res.Unusable, func(i, j int) bool { return res.Unusable[i].Address < res.Unusable[j].Address })
	devEntries, _ := os.ReadDir(r.Dev)
	for _, e := range devEntries {
		n := e.Name()
		switch {
		case vendors["nvidia"] && strings.HasPrefix(n, "nvidia"):
			res.DeviceNodes = append(res.DeviceNodes, n)
		case vendors["amd"] && n == "kfd":
			res.DeviceNodes = append(res.DeviceNodes, n)
		case len(vendors) > 0 && n == "dri":
			res.DeviceNodes = append(res.DeviceNodes, n)
		}
	}
	sort.Strings(res.DeviceNodes)
	return res, nil
}

// Count returns the number of GPUs of a vendor ("" = all).
func (r *Result) Count(vendor string) int {
	n := 0
	for _, d := range r.Devices {
		if vendor == "" || d.Vendor == vendor {
			n++
		}
	}
	return n
}

// Labels are the Node labels describing the GPUs (none without GPUs). With GPUs of both vendors the
// vendor label is "mixed".
func (r *Result) Labels() map[string]string {
	if len(r.Devices) == 0 {
		return nil
	}
	l := map[string]string{LabelPresent: "true", LabelCount: strconv.Itoa(len(r.Devices))}
	nv, amd := r.Count("nvidia"), r.Count("amd")
	switch {
	case nv > 0 && amd > 0:
		l[LabelVendor] = "mixed"
	case nv > 0:
		l[LabelVendor] = "nvidia"
	default:
		l[LabelVendor] = "amd"
	}
	if nv > 0 {
		l[LabelNVIDIAPresent] = "true"
	}
	if p := r.product(); p != "" {
		l[LabelProduct] = p
	}
	return l
}

// product is the common model of the GPUs as a label value: "" when any is unnamed, "mixed" when they
// differ.
func (r *Result) product() string {
	var model string
	for _, d := range r.Devices {
		switch {
		case d.Model == "":
			return ""
		case model == "":
			model = d.Model
		case model != d.Model:
			return "mixed"
		}
	}
	return LabelValue(model)
}

// LabelValue turns a name into a label value: runs of characters a label value cannot hold become one
// "-", the ends are trimmed to alphanumerics, and it is cut to 63 characters.
func LabelValue(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range s {
		switch {
		case alnum(c) || c == '.' || c == '_' || c == '-':
			b.WriteRune(c)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	v := b.String()
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.TrimFunc(v, func(c rune) bool { return !alnum(c) })
}

func alnum(c rune) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// boundDriver is the name of the driver bound to the PCI device in dir ("" when none).
func boundDriver(dir string) string {
	target, err := os.Readlink(filepath.Join(dir, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// nvidiaModel reads the "Model:" line of the NVIDIA driver's information file for the GPU at addr.
func nvidiaModel(proc, addr string) string {
	b, err := os.ReadFile(filepath.Join(proc, "driver", "nvidia", "gpus", addr, "information")) //nolint:gosec // procfs file under the configured root
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "Model" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func readTrim(p string) string {
	b, err := os.ReadFile(p) //nolint:gosec // sysfs attribute under the configured root
	if err != nil {
		return ""
	}
	return strings.ToLower(strings.TrimSpace(string(b)))
}
