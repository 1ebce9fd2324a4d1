package redfish

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// Inventory reads the system's hardware. Members that are absent or disabled (Status.State "Absent") are
// skipped, as an empty DIMM slot is not memory.
func (c *gofishClient) Inventory(_ context.Context) (*Inventory, error) {
	c.budget.Store(maxRequestsPerCall)
	s, err := c.system()
	if err != nil {
		return nil, err
	}
	inv := &Inventory{
		Manufacturer: s.Manufacturer,
		Model:        s.Model,
		SerialNumber: s.SerialNumber,
		BIOSVersion:  s.BiosVersion,
		Hostname:     hostname(s.HostName),
	}
	for _, read := range []func(*schemas.ComputerSystem, *Inventory) error{c.readProcessors, c.readMemory, c.readNICs, c.readDisks, c.readPCIeGPUs} {
		if err := read(s, inv); err != nil {
			return nil, err
		}
	}
	return inv, nil
}

// readProcessors reads CPUs (threads, sockets, model, speed) and GPUs published as processors.
func (c *gofishClient) readProcessors(s *schemas.ComputerSystem, inv *Inventory) error {
	procs, err := s.Processors()
	if err != nil {
		return c.classify("read processors from", err)
	}
	byODataID(procs)
	for _, p := range procs {
		if absent(p.Status) {
			continue
		}
		if p.ProcessorType == schemas.GPUProcessorType {
			inv.GPUs = append(inv.GPUs, GPU{Name: p.ID, Vendor: p.Manufacturer, Model: p.Model})
			continue
		}
		if p.ProcessorType != "" && p.ProcessorType != schemas.CPUProcessorType {
			continue
		}
		inv.CPU.SocketCount++
		if inv.CPU.Model == "" {
			inv.CPU.Model = p.Model
			inv.CPU.Arch = cpuArch(p)
		}
		threads, err := figure("processor "+p.ID+" TotalThreads", p.TotalThreads, maxThreads)
		if err == nil && threads == 0 {
			threads, err = figure("processor "+p.ID+" TotalCores", p.TotalCores, maxThreads)
		}
		speed, serr := figure("processor "+p.ID+" MaxSpeedMHz", p.MaxSpeedMHz, maxSpeedMHz)
		if err = errors.Join(err, serr); err != nil {
			return c.classify("read processors from", err)
		}
		inv.CPU.Count += threads
		inv.CPU.MaxSpeedMHz = max(inv.CPU.MaxSpeedMHz, speed)
	}
	if inv.CPU.Count == 0 {
		// Some BMCs publish only the summary.
		n := deref(s.ProcessorSummary.LogicalProcessorCount)
		if n == 0 {
			n = deref(s.ProcessorSummary.CoreCount)
		}
		if n > maxThreads {
			return c.classify("read processors from", fmt.Errorf("ProcessorSummary reports %d processors, beyond %d", n, maxThreads))
		}
		inv.CPU.Count = int(n)
		if inv.CPU.Model == "" {
			inv.CPU.Model = s.ProcessorSummary.Model
		}
	}
	return nil
}

// readMemory adds up the present DIMMs (or takes the summary).
func (c *gofishClient) readMemory(s *schemas.ComputerSystem, inv *Inventory) error {
	mem, err := s.Memory()
	if err != nil {
		return c.classify("read memory from", err)
	}
	byODataID(mem)
	for _, m := range mem {
		if absent(m.Status) {
			continue
		}
		mib, err := figure("memory "+m.ID+" CapacityMiB", m.CapacityMiB, maxDIMMMiB)
		if err != nil {
			return c.classify("read memory from", err)
		}
		inv.MemoryMiB += mib
	}
	if gib := s.MemorySummary.TotalSystemMemoryGiB; inv.MemoryMiB == 0 && gib != nil {
		// A float in the schema: NaN, infinite and negative sizes do not convert to an int.
		if math.IsNaN(*gib) || *gib < 0 || *gib > maxDIMMMiB/1024 {
			return c.classify("read memory from", fmt.Errorf("MemorySummary reports TotalSystemMemoryGiB %v, not a size from 0 to %d GiB", *gib, maxDIMMMiB/1024))
		}
		inv.MemoryMiB = int(*gib * 1024)
	}
	return nil
}

// readNICs reads one NIC per MAC address.
func (c *gofishClient) readNICs(s *schemas.ComputerSystem, inv *Inventory) error {
	nics, err := s.EthernetInterfaces()
	if err != nil {
		return c.classify("read Ethernet interfaces from", err)
	}
	byODataID(nics)
	for _, n := range nics {
		if absent(n.Status) {
			continue
		}
		mac := n.PermanentMACAddress
		if mac == "" {
			mac = n.MACAddress
		}
		// VLAN sub-interfaces repeat their parent's MAC: one NIC per MAC.
		if slices.ContainsFunc(inv.NICs, func(x NIC) bool { return strings.EqualFold(x.MAC, mac) }) {
			continue
		}
		speed, err := figure("Ethernet interface "+n.ID+" SpeedMbps", n.SpeedMbps, maxSpeedMbps)
		if err != nil {
			return c.classify("read Ethernet interfaces from", err)
		}
		inv.NICs = append(inv.NICs, NIC{Name: n.ID, MAC: strings.ToLower(mac), SpeedGbps: speed / 1000, IPs: nicIPs(n)})
	}
	return nil
}

// maxIPsPerNIC bounds the addresses kept per interface (a BMC's list is not trusted to be short).
const maxIPsPerNIC = 4

// nicIPs are an interface's usable IPv4 then IPv6 addresses.
func nicIPs(n *schemas.EthernetInterface) []string {
	var out []string
	add := func(s string) {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.IsUnspecified() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.Zone() != "" {
			return
		}
		if a = a.Unmap(); !slices.Contains(out, a.String()) && len(out) < maxIPsPerNIC {
			out = append(out, a.String())
		}
	}
	for _, a := range n.IPv4Addresses {
		add(a.Address)
	}
	for _, a := range n.IPv6Addresses {
		add(a.Address)
	}
	return out
}

// hostname is the BMC's HostName if it is a valid DNS name (RFC 1123), else "": it becomes a Machine address.
func hostname(s string) string {
	s = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
	if len(s) == 0 || len(s) > 253 {
		return ""
	}
	for _, label := range strings.Split(s, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return ""
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return ""
			}
		}
	}
	return s
}

// readDisks reads the drives of every storage controller, or the SimpleStorage devices of BMCs without
// any.
func (c *gofishClient) readDisks(s *schemas.ComputerSystem, inv *Inventory) error {
	storages, err := s.Storage()
	if err != nil {
		return c.classify("read storage from", err)
	}
	byODataID(storages)
	for _, st := range storages {
		drives, err := st.Drives()
		if err != nil {
			return c.classify("read drives of storage "+st.ID+" from", err)
		}
		byODataID(drives)
		for _, d := range drives {
			if absent(d.Status) {
				continue
			}
			size, err := figure("drive "+d.ID+" CapacityBytes", d.CapacityBytes, math.MaxInt64)
			if err != nil {
				return c.classify("read drives of storage "+st.ID+" from", err)
			}
			disk := Disk{Name: d.ID, Model: d.Model, Vendor: d.Manufacturer, SerialNumber: d.SerialNumber,
				SizeBytes: int64(size), MediaType: string(d.MediaType)}
			for _, id := range d.Identifiers {
				if id.DurableNameFormat == schemas.NAADurableNameFormat || id.DurableNameFormat == schemas.EUIDurableNameFormat {
					disk.WWN = id.DurableName
				}
			}
			inv.Disks = append(inv.Disks, disk)
		}
	}
	if len(storages) > 0 {
		return nil
	}
	// Older BMCs (and DMTF's rack-server mockup) publish disks only through SimpleStorage.
	simple, err := s.SimpleStorage()
	if err != nil {
		return c.classify("read simple storage from", err)
	}
	byODataID(simple)
	for _, st := range simple {
		for i, d := range st.Devices {
			if absent(d.Status) {
				continue
			}
			inv.Disks = append(inv.Disks, Disk{Name: fmt.Sprintf("%s-%d", st.ID, i), Model: d.Model, Vendor: d.Manufacturer,
				SizeBytes: clampInt64(deref(d.CapacityBytes))})
		}
	}
	return nil
}

// readPCIeGPUs reads GPUs that a BMC publishes only as PCIe devices (older schemas have no GPU
// processors).
func (c *gofishClient) readPCIeGPUs(s *schemas.ComputerSystem, inv *Inventory) error {
	if len(inv.GPUs) > 0 {
		return nil
	}
	devs, err := s.PCIeDevices()
	if err != nil {
		return c.classify("read PCIe devices from", err)
	}
	byODataID(devs)
	for _, d := range devs {
		if absent(d.Status) || !looksLikeGPU(d) {
			continue
		}
		inv.GPUs = append(inv.GPUs, GPU{Name: d.ID, Vendor: d.Manufacturer, Model: d.Model})
	}
	return nil
}

// byODataID orders members by their URI: gofish reads a collection's members concurrently and returns
// them in the order the answers arrived, and two reads of the same BMC must give the same inventory
// (the same first CPU model, the same name for a MAC that a VLAN interface repeats).
func byODataID[T interface{ GetODataID() string }](members []T) {
	slices.SortStableFunc(members, func(a, b T) int { return strings.Compare(a.GetODataID(), b.GetODataID()) })
}

// Bounds of the figures a BMC reports: beyond them a figure is a broken BMC's, not a machine's.
const (
	maxThreads   = 1 << 20
	maxSpeedMHz  = 1 << 20
	maxSpeedMbps = 1 << 30
	maxDIMMMiB   = 1 << 40
)

// figure reads a count or size a BMC reports: absent is 0 (unknown); a negative one, or one beyond limit,
// is an error naming it.
func figure(what string, v *int, limit int) (int, error) {
	n := deref(v)
	if n < 0 || n > limit {
		return 0, fmt.Errorf("%s is %d, not a figure from 0 to %d", what, n, limit)
	}
	return n, nil
}

func absent(st schemas.Status) bool {
	return st.State == schemas.AbsentState || st.State == schemas.DisabledState
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func cpuArch(p *schemas.Processor) string {
	switch {
	case p.InstructionSet == schemas.X8664InstructionSet:
		return "x86_64"
	case p.InstructionSet == schemas.ARMA64InstructionSet:
		return "aarch64"
	case p.ProcessorArchitecture != "":
		return string(p.ProcessorArchitecture)
	}
	return ""
}

// looksLikeGPU matches PCIe devices by the names GPU vendors give them; the class code would need one
// more request per function.
func looksLikeGPU(d *schemas.PCIeDevice) bool {
	s := strings.ToLower(d.Manufacturer + " " + d.Model + " " + d.Name)
	for _, w := range []string{"nvidia", "gpu", "radeon", "instinct", "accelerator"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// clampInt64 converts a Redfish unsigned size, which a broken BMC could report beyond int64.
func clampInt64(v uint) int64 {
	if uint64(v) > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
