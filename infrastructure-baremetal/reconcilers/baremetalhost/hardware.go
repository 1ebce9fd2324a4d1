package baremetalhost

import (
	"encoding/json"

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
	for _, n := range inv.NICs {
		hd.NIC = append(hd.NIC, metal3v1.NIC{Name: n.Name, MAC: n.MAC, SpeedGbps: n.SpeedGbps})
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
