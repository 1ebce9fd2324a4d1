package baremetalhost

import (
	"encoding/json"
	"strconv"
	"strings"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
)

// hardwareDetails maps the Redfish inventory onto Metal3's status.hardware.
func hardwareDetails(inv *redfish.Inventory) *metal3v1.HardwareDetails {
	hd := &metal3v1.HardwareDetails{
		SystemVendor: metal3v1.HardwareSystemVendor{Manufacturer: inv.Manufacturer, ProductName: inv.Model, SerialNumber: inv.SerialNumber},
		Firmware:     metal3v1.Firmware{BIOS: metal3v1.BIOS{Version: inv.BIOSVersion}},
		RAMMebibytes: inv.MemoryMiB,
		CPU: metal3v1.CPU{Arch: inv.CPU.Arch, Model: inv.CPU.Model, Count: inv.CPU.Count,
			ClockMegahertz: metal3v1.ClockSpeed(inv.CPU.MaxSpeedMHz)},
	}
	hd.Hostname = inv.Hostname
	// Metal3 keeps one IP per NIC entry: an interface with several addresses is listed once per address,
	// as Metal3's baremetal-operator lists an interface's IPv4 and IPv6 addresses.
	for _, n := range inv.NICs {
		nic := metal3v1.NIC{Name: n.Name, MAC: n.MAC, SpeedGbps: n.SpeedGbps}
		if len(n.IPs) == 0 {
			hd.NIC = append(hd.NIC, nic)
		}
		for _, ip := range n.IPs {
			nic.IP = ip
			hd.NIC = append(hd.NIC, nic)
		}
	}
	for _, d := range inv.Disks {
		t := metal3v1.DiskType("")
		switch d.MediaType {
		case "SSD":
			t = metal3v1.SSD
		case "HDD":
			t = metal3v1.HDD
		}
		hd.Storage = append(hd.Storage, metal3v1.Storage{Name: d.Name, Model: d.Model, Vendor: d.Vendor, SerialNumber: d.SerialNumber,
			WWN: d.WWN, SizeBytes: metal3v1.Capacity(d.SizeBytes), Type: t, Rotational: d.MediaType == "HDD"})
	}
	return hd
}

// setGPULabels sets GPUCountLabel and GPUVendorLabel from the inventory's GPUs, removing them from a host
// that has none (or, for the vendor, GPUs of several vendors).
func setGPULabels(h *metal3v1.BareMetalHost, gpus []redfish.GPU) {
	if len(gpus) == 0 {
		delete(h.Labels, GPUCountLabel)
		delete(h.Labels, GPUVendorLabel)
		return
	}
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	h.Labels[GPUCountLabel] = strconv.Itoa(len(gpus))
	vendor := gpuVendor(gpus[0].Vendor)
	for _, g := range gpus[1:] {
		if gpuVendor(g.Vendor) != vendor {
			vendor = ""
		}
	}
	if vendor != "" {
		h.Labels[GPUVendorLabel] = vendor
	} else {
		delete(h.Labels, GPUVendorLabel)
	}
}

// gpuVendor turns a BMC's manufacturer string into a label value. BMCs spell vendors differently
// ("NVIDIA", "NVIDIA Corporation", "Advanced Micro Devices, Inc."), so the common ones map to one short name
// a selector can rely on; anything else is lower-cased with runs of other characters replaced by "-".
func gpuVendor(manufacturer string) string {
	m := strings.ToLower(strings.TrimSpace(manufacturer))
	switch {
	case strings.Contains(m, "nvidia"):
		return "nvidia"
	case strings.Contains(m, "advanced micro devices") || m == "amd" || strings.HasPrefix(m, "amd ") || strings.Contains(m, "[amd"):
		return "amd"
	case strings.Contains(m, "intel"):
		return "intel"
	}
	var b strings.Builder
	dash := false
	for _, r := range m {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	v := strings.TrimRight(b.String(), "-")
	if len(v) > 63 {
		v = strings.TrimRight(v[:63], "-")
	}
	return v
}

func gpusJSON(gpus []redfish.GPU) string {
	type gpu struct {
		Name   string `json:"name"`
		Vendor string `json:"vendor,omitempty"`
		Model  string `json:"model,omitempty"`
	}
	out := make([]gpu, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, gpu{Name: g.Name, Vendor: g.Vendor, Model: g.Model})
	}
	raw, _ := json.Marshal(out)
	return string(raw)
}
