// Package gpu detects GPUs from sysfs (PCI vendor and class) and device nodes, and turns them into Node
// labels and device binds for the nspawn machine. Roots are configurable so tests use synthetic trees.
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
	// LabelNVIDIAPresent is the label NVIDIA's device plugin and GPU operator select nodes with.
	LabelNVIDIAPresent = "nvidia.com/gpu.present"
)

// Device is one GPU found on the PCI bus.
type Device struct {
	// Address is the PCI address, e.g. 0000:3b:00.0.
	Address string `json:"address"`
	// Vendor is "nvidia" or "amd".
	Vendor string `json:"vendor"`
	// DeviceID is the PCI device ID, e.g. 0x20b0.
	DeviceID string `json:"deviceID"`
}

// Result is what Detect found.
type Result struct {
	Devices []Device `json:"devices,omitempty"`
	// DeviceNodes are /dev entries to bind into the machine (relative to the dev root, e.g. "nvidia0").
	DeviceNodes []string `json:"deviceNodes,omitempty"`
}

// Roots are where Detect looks (defaults /sys and /dev).
type Roots struct {
	Sys string
	Dev string
}

// Detect lists display-class PCI devices (class 0x03xxxx) from NVIDIA and AMD, and the device nodes their
// drivers created (/dev/nvidia*, /dev/nvidia-caps, /dev/kfd, /dev/dri).
func Detect(r Roots) (*Result, error) {
	if r.Sys == "" {
		r.Sys = "/sys"
	}
	if r.Dev == "" {
		r.Dev = "/dev"
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
		if !strings.HasPrefix(class, "0x03") { // display controllers: VGA 0x0300, 3D 0x0302, other 0x0380
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
		vendors[name] = true
		res.Devices = append(res.Devices, Device{Address: e.Name(), Vendor: name, DeviceID: readTrim(filepath.Join(dir, "device"))})
	}
	sort.Slice(res.Devices, func(i, j int) bool { return res.Devices[i].Address < res.Devices[j].Address })
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
	return l
}

func readTrim(p string) string {
	b, err := os.ReadFile(p) //nolint:gosec // sysfs attribute under the configured root
	if err != nil {
		return ""
	}
	return strings.ToLower(strings.TrimSpace(string(b)))
}
