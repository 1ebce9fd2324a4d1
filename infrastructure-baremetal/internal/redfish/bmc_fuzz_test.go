package redfish_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
)

// fuzzBMC serves DMTF's public-rackmount1 mockup, except that one document (path) is answered with the
// fuzzed body instead.
type fuzzBMC struct {
	mockup *mockup
	mu     sync.Mutex
	path   string
	body   []byte
}

func (b *fuzzBMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	path, body := b.path, b.body
	b.mu.Unlock()
	if r.Method == http.MethodGet && strings.TrimRight(r.URL.Path, "/") == path {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}
	b.mockup.ServeHTTP(w, r)
}

// readResult is everything the client returned for one BMC.
type readResult struct {
	sys *redfish.System
	inv *redfish.Inventory
	err error
}

// readBMC dials the BMC and reads what inspection and the power loop read: the system, then the
// inventory.
func readBMC(addr redfish.Address) readResult {
	ctx := context.Background()
	c, err := redfish.Dial(ctx, redfish.Config{Address: addr, Username: "Administrator", Password: "Password", Timeout: 5 * time.Second})
	if err != nil {
		return readResult{err: err}
	}
	defer c.Close()
	sys, err := c.System(ctx)
	if err != nil {
		return readResult{err: err}
	}
	inv, err := c.Inventory(ctx)
	return readResult{sys: sys, inv: inv, err: err}
}

// stepOf names the read a document belongs to, as the client's errors name it ("" for the service
// root and the system, whose links every read follows).
func stepOf(path string) string {
	for _, s := range []struct{ segment, step string }{
		{"/Processors", "processors"}, {"/Memory", "memory"}, {"/EthernetInterfaces", "Ethernet interfaces"},
		{"/SimpleStorage", "simple storage"}, {"/Storage", "storage"}, {"/PCIeDevices", "PCIe devices"},
	} {
		if strings.Contains(path, s.segment) {
			return s.step
		}
	}
	return ""
}

// FuzzInventoryFromBMCResponses feeds the client arbitrary BMC answers: a real BMC's documents (DMTF's
// mockup) with one of those the client reads replaced by the fuzzed body. Whatever the BMC answers, the
// client returns within bounded time; a failure is an error that names the BMC and the read that failed;
// an inventory it accepts is sane (no negative sizes or counts, one NIC per lower-case MAC) and holds
// what the replaced document says; the real document gives exactly the inventory the mockup holds.
func FuzzInventoryFromBMCResponses(f *testing.F) {
	root := filepath.Join("..", "..", "..", "test", "fixtures", "redfish", "public-rackmount1")
	if _, err := os.Stat(filepath.Join(root, "index.json")); err != nil {
		f.Fatalf("DMTF mockup missing (test/fixtures/redfish/README.md): %v", err)
	}
	bmc := &fuzzBMC{mockup: &mockup{root: root}}
	srv := httptest.NewServer(bmc)
	f.Cleanup(srv.Close)
	endpoint := srv.URL
	addr, err := redfish.ParseAddress("redfish+http://" + strings.TrimPrefix(endpoint, "http://") + "/redfish/v1/Systems/437XR1138R2")
	if err != nil {
		f.Fatal(err)
	}

	// The documents the client reads are those a clean read GETs.
	want := readBMC(addr)
	if want.err != nil {
		f.Fatalf("reading the unmodified mockup: %v", want.err)
	}
	if want.inv.Manufacturer != "Contoso" || want.inv.CPU.Count != 16 || want.inv.MemoryMiB == 0 || len(want.inv.NICs) == 0 {
		f.Fatalf("the unmodified mockup gives an unexpected inventory %+v", want.inv)
	}
	var paths, originals []string
	bmc.mockup.mu.Lock()
	for _, l := range bmc.mockup.log {
		p, ok := strings.CutPrefix(l, http.MethodGet+" ")
		if ok && !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	bmc.mockup.log = nil
	bmc.mockup.mu.Unlock()
	slices.Sort(paths)
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, strings.TrimPrefix(p, "/redfish/v1"), "index.json"))
		if err != nil {
			b = nil // a document the mockup does not have (404): the fuzzer may invent it
		}
		originals = append(originals, string(b))
	}
	for i, body := range originals {
		f.Add(uint16(i), []byte(body))
		if body != "" {
			f.Add(uint16(i), []byte(body[:len(body)/2]))
		}
	}
	sysDoc := slices.Index(paths, addr.SystemPath)
	f.Add(uint16(sysDoc), []byte(`{"Id":"437XR1138R2","MemorySummary":{"TotalSystemMemoryGiB":-1e300},"Memory":{"@odata.id":"/nowhere"}}`))
	if i := slices.Index(paths, addr.SystemPath+"/Processors"); i >= 0 {
		// A collection whose next page is itself.
		f.Add(uint16(i), []byte(`{"Members":[],"Members@odata.nextLink":"`+addr.SystemPath+`/Processors"}`))
	}

	f.Fuzz(func(t *testing.T, doc uint16, body []byte) {
		i := int(doc) % len(paths)
		path := paths[i]
		bmc.mu.Lock()
		bmc.path, bmc.body = path, body
		bmc.mu.Unlock()
		defer func() {
			bmc.mockup.mu.Lock()
			bmc.mockup.log = nil
			bmc.mockup.mu.Unlock()
		}()

		done := make(chan readResult, 1)
		go func() { done <- readBMC(addr) }()
		var got readResult
		select {
		case got = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s = %q: the client did not return within 30 s", path, body)
		}

		if got.err != nil {
			msg := got.err.Error()
			if !strings.Contains(msg, "BMC "+endpoint) {
				t.Fatalf("%s = %q: error does not name the BMC %s: %v", path, body, endpoint, got.err)
			}
			if step := stepOf(path); step != "" && !strings.Contains(msg, step) {
				t.Fatalf("%s = %q: error does not name the failed read (%s): %v", path, body, step, got.err)
			}
			return
		}
		checkSane(t, path, body, got.inv)
		if originals[i] != "" && string(body) == originals[i] {
			if !reflect.DeepEqual(got.sys, want.sys) || !reflect.DeepEqual(got.inv, want.inv) {
				t.Fatalf("%s unmodified: read %+v %+v, want %+v %+v", path, got.sys, got.inv, want.sys, want.inv)
			}
		}
		switch {
		case path == addr.SystemPath:
			checkSystemDoc(t, body, got)
		case strings.Contains(path, "/EthernetInterfaces/"):
			checkNICDoc(t, path, body, got.inv)
		}
	})
}

func checkSane(t *testing.T, path string, body []byte, inv *redfish.Inventory) {
	t.Helper()
	if inv.CPU.Count < 0 || inv.CPU.SocketCount < 0 || inv.CPU.MaxSpeedMHz < 0 || inv.MemoryMiB < 0 {
		t.Fatalf("%s = %q: negative CPU or memory figures in %+v", path, body, inv)
	}
	seen := map[string]bool{}
	for _, n := range inv.NICs {
		if n.MAC != strings.ToLower(n.MAC) || seen[n.MAC] || n.SpeedGbps < 0 {
			t.Fatalf("%s = %q: NICs %+v are not one per lower-case MAC with a speed", path, body, inv.NICs)
		}
		seen[n.MAC] = true
	}
	for _, d := range inv.Disks {
		if d.SizeBytes < 0 {
			t.Fatalf("%s = %q: disk %+v has a negative size", path, body, d)
		}
	}
}

// checkSystemDoc: the system's identity and power state are the document's.
func checkSystemDoc(t *testing.T, body []byte, got readResult) {
	t.Helper()
	var doc struct {
		ID                                             string `json:"Id"`
		Manufacturer, Model, SerialNumber, BiosVersion string
		PowerState                                     string
	}
	if json.Unmarshal(body, &doc) != nil {
		return
	}
	gotIDs := []string{got.sys.ID, got.inv.Manufacturer, got.inv.Model, got.inv.SerialNumber, got.inv.BIOSVersion}
	wantIDs := []string{doc.ID, doc.Manufacturer, doc.Model, doc.SerialNumber, doc.BiosVersion}
	if !slices.Equal(gotIDs, wantIDs) {
		t.Fatalf("system = %q: read identity %q, the document says %q", body, gotIDs, wantIDs)
	}
	if on := doc.PowerState == "On" || doc.PowerState == "PoweringOn"; got.sys.PoweredOn != on {
		t.Fatalf("system = %q: read powered on %v, the document says %q", body, got.sys.PoweredOn, doc.PowerState)
	}
}

// checkNICDoc: a present interface's MAC is in the inventory.
func checkNICDoc(t *testing.T, path string, body []byte, inv *redfish.Inventory) {
	t.Helper()
	var doc struct {
		MACAddress, PermanentMACAddress string
		Status                          struct{ State string }
	}
	if json.Unmarshal(body, &doc) != nil || doc.Status.State == "Absent" || doc.Status.State == "Disabled" {
		return
	}
	mac := doc.PermanentMACAddress
	if mac == "" {
		mac = doc.MACAddress
	}
	if mac == "" {
		return
	}
	if !slices.ContainsFunc(inv.NICs, func(n redfish.NIC) bool { return n.MAC == strings.ToLower(mac) }) {
		t.Fatalf("%s = %q: MAC %s missing from NICs %+v", path, body, mac, inv.NICs)
	}
}
