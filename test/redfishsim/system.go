package redfishsim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"sync"
)

func (s *Server) systemResource(w http.ResponseWriter, r *http.Request, sys *system, rest []string) {
	base := "/redfish/v1/Systems/" + sys.spec.ID
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		doc := s.systemDoc(sys)
		w.Header().Set("ETag", doc["@odata.etag"].(string))
		writeJSON(w, http.StatusOK, doc)
	case len(rest) == 0 && r.Method == http.MethodPatch:
		s.patchBoot(w, r, sys)
	case len(rest) == 2 && rest[0] == "Actions" && rest[1] == "ComputerSystem.Reset" && r.Method == http.MethodPost:
		s.reset(w, r, sys)
	case len(rest) >= 1 && rest[0] == "Processors":
		s.processors(w, base, sys, rest[1:])
	case len(rest) >= 1 && rest[0] == "Memory":
		s.memory(w, base, sys, rest[1:])
	case len(rest) >= 1 && rest[0] == "EthernetInterfaces":
		s.ethernetInterfaces(w, base, sys, rest[1:])
	case len(rest) >= 1 && rest[0] == "Storage":
		s.storage(w, base, sys, rest[1:])
	case len(rest) == 2 && rest[0] == "PCIeDevices":
		pcieDevice(w, base, sys, rest[1])
	default:
		writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no resource at "+r.URL.Path)
	}
}

// processors serves the processor collection (rest empty) and its CPUs and GPUs.
func (s *Server) processors(w http.ResponseWriter, base string, sys *system, rest []string) {
	if len(rest) == 0 {
		ids := []string{}
		for i := range sys.spec.CPUs {
			ids = append(ids, fmt.Sprintf("CPU%d", i))
		}
		for i := range sys.spec.GPUs {
			ids = append(ids, fmt.Sprintf("GPU%d", i))
		}
		s.collection(w, base+"/Processors", "ProcessorCollection", ids)
		return
	}
	var idx int
	if _, err := fmt.Sscanf(rest[0], "CPU%d", &idx); len(rest) == 1 && err == nil && idx < len(sys.spec.CPUs) {
		c := sys.spec.CPUs[idx]
		is := "x86-64"
		if !c.InstructionSetX864 {
			is = "ARM-A64"
		}
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": base + "/Processors/" + rest[0], "@odata.type": "#Processor.v1_13_0.Processor",
			"Id": rest[0], "Name": "Processor", "ProcessorType": "CPU", "ProcessorArchitecture": "x86", "InstructionSet": is,
			"Manufacturer": "Emulated", "Model": c.Model, "MaxSpeedMHz": c.MaxSpeedMHz, "TotalCores": c.Cores, "TotalThreads": c.Threads,
			"Status": map[string]any{"State": "Enabled", "Health": "OK"}})
		return
	}
	if _, err := fmt.Sscanf(rest[0], "GPU%d", &idx); len(rest) == 1 && err == nil && idx < len(sys.spec.GPUs) {
		g := sys.spec.GPUs[idx]
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": base + "/Processors/" + rest[0], "@odata.type": "#Processor.v1_13_0.Processor",
			"Id": rest[0], "Name": "GPU", "ProcessorType": "GPU", "Manufacturer": g.Vendor, "Model": g.Model,
			"Status": map[string]any{"State": "Enabled", "Health": "OK"}})
		return
	}
	writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no such processor")
}

// memory serves the memory collection (rest empty) and its DIMMs.
func (s *Server) memory(w http.ResponseWriter, base string, sys *system, rest []string) {
	if len(rest) == 0 {
		ids := []string{}
		for i := range sys.spec.DIMMsMiB {
			ids = append(ids, fmt.Sprintf("DIMM%d", i))
		}
		s.collection(w, base+"/Memory", "MemoryCollection", ids)
		return
	}
	var idx int
	if _, err := fmt.Sscanf(rest[0], "DIMM%d", &idx); len(rest) != 1 || err != nil || idx >= len(sys.spec.DIMMsMiB) {
		writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no such DIMM")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"@odata.id": base + "/Memory/" + rest[0], "@odata.type": "#Memory.v1_11_0.Memory",
		"Id": rest[0], "Name": "DIMM", "MemoryType": "DRAM", "CapacityMiB": sys.spec.DIMMsMiB[idx],
		"Status": map[string]any{"State": "Enabled", "Health": "OK"}})
}

// ethernetInterfaces serves the interface collection (rest empty) and its interfaces.
func (s *Server) ethernetInterfaces(w http.ResponseWriter, base string, sys *system, rest []string) {
	if len(rest) == 0 {
		ids := []string{}
		for _, n := range sys.spec.NICs {
			ids = append(ids, n.ID)
		}
		s.collection(w, base+"/EthernetInterfaces", "EthernetInterfaceCollection", ids)
		return
	}
	for _, n := range sys.spec.NICs {
		if len(rest) == 1 && n.ID == rest[0] {
			v4, v6 := []any{}, []any{}
			for _, ip := range n.IPs {
				if a, err := netip.ParseAddr(ip); err == nil && a.Is4() {
					v4 = append(v4, map[string]any{"Address": ip, "SubnetMask": "255.255.255.0", "AddressOrigin": "DHCP"})
				} else {
					v6 = append(v6, map[string]any{"Address": ip, "PrefixLength": 64, "AddressOrigin": "DHCPv6"})
				}
			}
			writeJSON(w, http.StatusOK, map[string]any{"@odata.id": base + "/EthernetInterfaces/" + n.ID, "@odata.type": "#EthernetInterface.v1_6_0.EthernetInterface",
				"Id": n.ID, "Name": "Ethernet interface", "MACAddress": n.MAC, "PermanentMACAddress": n.MAC, "SpeedMbps": n.SpeedMbps,
				"IPv4Addresses": v4, "IPv6Addresses": v6,
				"LinkStatus": "LinkUp", "Status": map[string]any{"State": "Enabled", "Health": "OK"}})
			return
		}
	}
	writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no such interface")
}

// storage serves the storage collection (rest empty), its one controller and its drives.
func (s *Server) storage(w http.ResponseWriter, base string, sys *system, rest []string) {
	switch {
	case len(rest) == 0:
		s.collection(w, base+"/Storage", "StorageCollection", []string{"1"})
	case len(rest) == 1 && rest[0] == "1":
		drives := []any{}
		for _, d := range sys.spec.Disks {
			drives = append(drives, link(base+"/Storage/1/Drives/"+d.ID))
		}
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": base + "/Storage/1", "@odata.type": "#Storage.v1_9_0.Storage",
			"Id": "1", "Name": "Storage", "Drives": drives, "Drives@odata.count": len(drives), "Status": map[string]any{"State": "Enabled", "Health": "OK"}})
	case len(rest) == 3 && rest[0] == "1" && rest[1] == "Drives":
		for _, d := range sys.spec.Disks {
			if d.ID == rest[2] {
				writeJSON(w, http.StatusOK, map[string]any{"@odata.id": base + "/Storage/1/Drives/" + d.ID, "@odata.type": "#Drive.v1_12_0.Drive",
					"Id": d.ID, "Name": d.ID, "Model": d.Model, "Manufacturer": d.Vendor, "SerialNumber": d.Serial, "CapacityBytes": d.SizeBytes,
					"MediaType": d.MediaType, "Identifiers": []any{map[string]any{"DurableName": d.WWN, "DurableNameFormat": "NAA"}},
					"Status": map[string]any{"State": "Enabled", "Health": "OK"}})
				return
			}
		}
		writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no such drive")
	default:
		writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no such storage resource")
	}
}

// pcieDevice serves the GPU published as PCIe device id.
func pcieDevice(w http.ResponseWriter, base string, sys *system, id string) {
	var idx int
	if _, err := fmt.Sscanf(id, "GPU%d", &idx); err != nil || idx >= len(sys.spec.GPUs) {
		writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no such PCIe device")
		return
	}
	g := sys.spec.GPUs[idx]
	writeJSON(w, http.StatusOK, map[string]any{"@odata.id": base + "/PCIeDevices/" + id, "@odata.type": "#PCIeDevice.v1_9_0.PCIeDevice",
		"Id": id, "Name": g.Model, "Manufacturer": g.Vendor, "Model": g.Model, "DeviceType": "SingleFunction",
		"Status": map[string]any{"State": "Enabled", "Health": "OK"}})
}

func (s *Server) systemJSON(sys *system) map[string]any {
	s.syncPower(sys)
	s.mu.Lock()
	defer s.mu.Unlock()
	base := "/redfish/v1/Systems/" + sys.spec.ID
	power := "Off"
	if sys.poweredOn {
		power = "On"
	}
	mem := 0
	for _, m := range sys.spec.DIMMsMiB {
		mem += m
	}
	threads := 0
	for _, c := range sys.spec.CPUs {
		threads += c.Threads
	}
	pcie := []any{}
	for i := range sys.spec.GPUs {
		pcie = append(pcie, link(fmt.Sprintf("%s/PCIeDevices/GPU%d", base, i)))
	}
	return map[string]any{
		"@odata.id": base, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
		"Id": sys.spec.ID, "Name": sys.spec.ID, "SystemType": "Physical",
		"Manufacturer": sys.spec.Manufacturer, "Model": sys.spec.Model, "SerialNumber": sys.spec.SerialNumber, "HostName": sys.spec.Hostname,
		"UUID": "00000000-0000-4000-8000-" + fmt.Sprintf("%012x", hash(sys.spec.ID)), "BiosVersion": sys.spec.BIOSVersion,
		"PowerState": power, "Status": map[string]any{"State": "Enabled", "Health": "OK"},
		"Boot": map[string]any{
			"BootSourceOverrideEnabled": sys.overrideOn, "BootSourceOverrideTarget": sys.overrideTgt, "BootSourceOverrideMode": sys.overrideMode,
			"BootSourceOverrideTarget@Redfish.AllowableValues": []string{"None", "Pxe", "Hdd", "Cd"},
		},
		"ProcessorSummary":   map[string]any{"Count": len(sys.spec.CPUs), "LogicalProcessorCount": threads},
		"MemorySummary":      map[string]any{"TotalSystemMemoryGiB": float64(mem) / 1024},
		"Processors":         link(base + "/Processors"),
		"Memory":             link(base + "/Memory"),
		"EthernetInterfaces": link(base + "/EthernetInterfaces"),
		"Storage":            link(base + "/Storage"),
		"PCIeDevices":        pcie,
		"Links":              map[string]any{"ManagedBy": []any{link("/redfish/v1/Managers/BMC")}},
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target":                            base + "/Actions/ComputerSystem.Reset",
			"ResetType@Redfish.AllowableValues": resetTypes(sys.spec),
		}},
	}
}

func resetTypes(spec SystemSpec) []string {
	if len(spec.ResetTypes) > 0 {
		return spec.ResetTypes
	}
	return DefaultResetTypes
}

func hash(s string) uint64 {
	var h uint64 = 1469598103934665603
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h & 0xffffffffffff
}

// systemDoc is the system's document as a client reads it: JSON-shaped values and its ETag.
func (s *Server) systemDoc(sys *system) map[string]any {
	var doc map[string]any
	b, _ := json.Marshal(s.systemJSON(sys))
	_ = json.Unmarshal(b, &doc)
	doc["@odata.etag"] = ETag(doc)
	return doc
}

// readBody reads a request's JSON body, refusing other media types and bodies over limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *RequestError) {
	if rerr := CheckJSONBody(r); rerr != nil {
		return nil, rerr
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return nil, badRequest("MalformedJSON", "failed to read the request body: %v", err)
	}
	return b, nil
}

// patchBoot changes the boot override, after the checks a BMC makes: JSON body, If-Match against the
// system's current ETag, and only writable properties with allowed values (ValidatePatch).
func (s *Server) patchBoot(w http.ResponseWriter, r *http.Request, sys *system) {
	body, rerr := readBody(w, r, 16384)
	if rerr != nil {
		rerr.Write(w)
		return
	}
	doc := s.systemDoc(sys)
	if rerr := CheckIfMatch(r, doc["@odata.etag"].(string)); rerr != nil {
		rerr.Write(w)
		return
	}
	if rerr := ValidatePatch(doc, body, ComputerSystemWritable); rerr != nil {
		rerr.Write(w)
		return
	}
	var patch struct {
		Boot struct {
			BootSourceOverrideEnabled string
			BootSourceOverrideTarget  string
			BootSourceOverrideMode    string
		}
	}
	_ = json.Unmarshal(body, &patch) // validated above
	s.mu.Lock()
	if t := patch.Boot.BootSourceOverrideTarget; t != "" {
		sys.overrideTgt = t
	}
	if e := patch.Boot.BootSourceOverrideEnabled; e != "" {
		sys.overrideOn = e
	}
	if m := patch.Boot.BootSourceOverrideMode; m != "" {
		sys.overrideMode = m
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request, sys *system) {
	raw, rerr := readBody(w, r, 4096)
	doc := s.systemDoc(sys)
	if rerr == nil && s.opts.IfMatchOnActions {
		rerr = CheckIfMatch(r, doc["@odata.etag"].(string))
	}
	if rerr == nil {
		rerr = ValidateAction(doc, "#ComputerSystem.Reset", raw, "ResetType")
	}
	if rerr != nil {
		rerr.Write(w)
		return
	}
	var body struct{ ResetType string }
	_ = json.Unmarshal(raw, &body) // validated above
	if s.failPower.Load() {
		writeError(w, http.StatusInternalServerError, "Base.1.0.InternalError", "power controller fault (injected)")
		return
	}
	ctx := context.WithoutCancel(r.Context())
	var err error
	switch body.ResetType {
	case "On", "ForceOn":
		err = s.powerOn(ctx, sys, false)
	case "ForceOff", "GracefulShutdown":
		err = s.powerOff(ctx, sys)
	case "ForceRestart", "GracefulRestart", "PowerCycle":
		if err = s.powerOff(ctx, sys); err == nil {
			err = s.powerOn(ctx, sys, true)
		}
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "Base.1.0.InternalError", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// powerOn boots the system, consuming a one-time override. A "On" to a system that is on does nothing
// (as on real BMCs, some of which answer an error instead); a restart always boots.
func (s *Server) powerOn(ctx context.Context, sys *system, restart bool) error {
	s.syncPower(sys)
	s.mu.Lock()
	if sys.poweredOn && !restart {
		s.mu.Unlock()
		return nil
	}
	target := ""
	if sys.overrideOn != "Disabled" && sys.overrideTgt != "None" {
		target = sys.overrideTgt
		if sys.overrideOn == "Once" {
			sys.overrideOn, sys.overrideTgt = "Disabled", "None"
		}
	}
	if target == "Pxe" {
		sys.pxeBoots++
	}
	sys.poweredOn = true
	sys.lastBootTaget = target
	id := sys.spec.ID
	s.mu.Unlock()
	if err := s.opts.Driver.PowerOn(ctx, id, target); err != nil {
		s.mu.Lock()
		sys.poweredOn = false
		s.mu.Unlock()
		return fmt.Errorf("failed to power on %s: %w", id, err)
	}
	return nil
}

func (s *Server) powerOff(ctx context.Context, sys *system) error {
	s.syncPower(sys)
	s.mu.Lock()
	on := sys.poweredOn
	sys.poweredOn = false
	id := sys.spec.ID
	s.mu.Unlock()
	if !on {
		return nil
	}
	if err := s.opts.Driver.PowerOff(ctx, id); err != nil {
		return fmt.Errorf("failed to power off %s: %w", id, err)
	}
	return nil
}

// MemoryDriver is a PowerDriver that only records boots (scale tests; no machine behind it).
type MemoryDriver struct {
	mu    sync.Mutex
	boots map[string][]string
}

// NewMemoryDriver returns an empty MemoryDriver.
func NewMemoryDriver() *MemoryDriver { return &MemoryDriver{boots: map[string][]string{}} }

// PowerOn implements PowerDriver.
func (d *MemoryDriver) PowerOn(_ context.Context, id, target string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.boots[id] = append(d.boots[id], target)
	return nil
}

// PowerOff implements PowerDriver.
func (d *MemoryDriver) PowerOff(context.Context, string) error { return nil }

// Boots lists the boot targets of a system's power-ons ("" normal, "Pxe", "Hdd", "Cd").
func (d *MemoryDriver) Boots(id string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.boots[id]...)
}

// syncPower notices a machine that powered itself off.
func (s *Server) syncPower(sys *system) {
	ps, ok := s.opts.Driver.(PowerStater)
	if !ok {
		return
	}
	running := ps.Running(sys.spec.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sys.poweredOn && !running {
		sys.poweredOn = false
	}
}
