package redfishsim_test

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/redfishsim"
)

// bmcClient sends raw Redfish requests to the emulator with basic auth, as curl against a BMC would.
type bmcClient struct {
	t    *testing.T
	base string
	http *http.Client
}

func startEmulator(t *testing.T) *bmcClient {
	t.Helper()
	sim, err := redfishsim.Start(redfishsim.Options{Username: "admin", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:00:00:01"))
	return &bmcClient{t: t, base: "https://" + sim.Host(), http: &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the emulator's self-signed certificate
	}}}
}

// do sends method path with body (JSON unless contentType says otherwise) and returns the status, the
// ETag header and the decoded answer.
func (c *bmcClient) do(method, path, body string, header ...string) (int, string, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.SetBasicAuth("admin", "pw")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rsp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer func() { _ = rsp.Body.Close() }()
	b, _ := io.ReadAll(rsp.Body)
	var doc map[string]any
	_ = json.Unmarshal(b, &doc)
	return rsp.StatusCode, rsp.Header.Get("ETag"), doc
}

// messageID is the MessageId of a Redfish error answer.
func messageID(doc map[string]any) string {
	e, _ := doc["error"].(map[string]any)
	id, _ := e["code"].(string)
	return id
}

// The emulator refuses what a BMC refuses, with the Base registry's message, before it changes anything:
// unknown and read-only properties, wrong types, values outside the published AllowableValues, bodies
// that are not JSON, unknown or missing action parameters, and a change based on a stale read (If-Match).
func TestEmulatorValidatesWhatClientsSend(t *testing.T) {
	c := startEmulator(t)
	const sys = "/redfish/v1/Systems/s1"
	for _, tc := range []struct {
		name, method, path, body, contentType string
		status                                int
		messageID                             string
	}{
		{"one-time PXE", http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once"}}`, "", 204, ""},
		{"boot mode", http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideMode":"UEFI"}}`, "", 204, ""},
		{"unknown property", http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideTarget":"Pxe","Bogus":1}}`, "", 400, "Base.1.0.PropertyUnknown"},
		{"read-only property", http.MethodPatch, sys, `{"PowerState":"On"}`, "", 400, "Base.1.0.PropertyNotWritable"},
		{"read-only inside a writable object", http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideTarget@Redfish.AllowableValues":["Pxe"]}}`, "", 400, "Base.1.0.PropertyNotWritable"},
		{"unsupported writable property", http.MethodPatch, sys, `{"AssetTag":"rack-4"}`, "", 400, "Base.1.0.PropertyUnknown"},
		{"value not allowed by the system", http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideTarget":"Usb"}}`, "", 400, "Base.1.0.PropertyValueNotInList"},
		{"value not in the schema", http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideEnabled":"Twice"}}`, "", 400, "Base.1.0.PropertyValueNotInList"},
		{"wrong type", http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideTarget":3}}`, "", 400, "Base.1.0.PropertyValueTypeError"},
		{"object expected", http.MethodPatch, sys, `{"Boot":"Pxe"}`, "", 400, "Base.1.0.PropertyValueTypeError"},
		{"empty patch", http.MethodPatch, sys, `{}`, "", 400, "Base.1.0.EmptyJSON"},
		{"not JSON", http.MethodPatch, sys, `Boot=Pxe`, "", 400, "Base.1.0.MalformedJSON"},
		{"not declared as JSON", http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideTarget":"Pxe"}}`, "text/plain", 415, "Base.1.0.UnsupportedMediaType"},
		{"reset", http.MethodPost, sys + "/Actions/ComputerSystem.Reset", `{"ResetType":"ForceOff"}`, "", 204, ""},
		{"reset type not offered", http.MethodPost, sys + "/Actions/ComputerSystem.Reset", `{"ResetType":"Nmi"}`, "", 400, "Base.1.0.ActionParameterValueNotInList"},
		{"reset without a type", http.MethodPost, sys + "/Actions/ComputerSystem.Reset", `{}`, "", 400, "Base.1.0.ActionParameterMissing"},
		{"reset with an unknown parameter", http.MethodPost, sys + "/Actions/ComputerSystem.Reset", `{"ResetType":"ForceOff","Delay":5}`, "", 400, "Base.1.0.ActionParameterUnknown"},
		{"session without a password", http.MethodPost, "/redfish/v1/SessionService/Sessions", `{"UserName":"admin"}`, "", 400, "Base.1.0.PropertyMissing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, _, before := c.do(http.MethodGet, sys, "")
			var header []string
			if tc.contentType != "" {
				header = []string{"Content-Type", tc.contentType}
			}
			status, _, doc := c.do(tc.method, tc.path, tc.body, header...)
			g.Expect(status).To(Equal(tc.status), "%v", doc)
			g.Expect(messageID(doc)).To(Equal(tc.messageID))
			if tc.status >= 400 {
				_, _, after := c.do(http.MethodGet, sys, "")
				g.Expect(after).To(Equal(before), "a refused request changes nothing")
			}
		})
	}

	t.Run("If-Match", func(t *testing.T) {
		g := NewWithT(t)
		_, etag, doc := c.do(http.MethodGet, sys, "")
		g.Expect(etag).To(HavePrefix(`W/"`))
		g.Expect(doc["@odata.etag"]).To(Equal(etag), "the document carries the header's ETag")
		status, _, _ := c.do(http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideTarget":"Hdd","BootSourceOverrideEnabled":"Continuous"}}`, "If-Match", etag)
		g.Expect(status).To(Equal(http.StatusNoContent), "the current ETag")
		_, etag2, _ := c.do(http.MethodGet, sys, "")
		g.Expect(etag2).NotTo(Equal(etag), "the change changed the ETag")
		status, _, rsp := c.do(http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideTarget":"Pxe"}}`, "If-Match", etag)
		g.Expect(status).To(Equal(http.StatusPreconditionFailed))
		g.Expect(messageID(rsp)).To(Equal("Base.1.0.PreconditionFailed"))
		_, _, now := c.do(http.MethodGet, sys, "")
		g.Expect(now["Boot"]).To(HaveKeyWithValue("BootSourceOverrideTarget", "Hdd"), "the stale change was not applied")
		status, _, _ = c.do(http.MethodPatch, sys, `{"Boot":{"BootSourceOverrideTarget":"Pxe"}}`, "If-Match", "*")
		g.Expect(status).To(Equal(http.StatusNoContent), "If-Match: * matches any version")
	})
}

// mockupRoot is DMTF's public-rackmount1 mockup (test/fixtures/redfish/README.md).
var mockupRoot = filepath.Join("..", "fixtures", "redfish", "public-rackmount1")

func readMockup(t *testing.T, uri string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mockupRoot, strings.TrimPrefix(uri, "/redfish/v1"), "index.json"))
	if err != nil {
		t.Fatalf("DMTF mockup document of %s missing (test/fixtures/redfish/README.md): %v", uri, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// The emulator's documents are shaped like a real BMC's: every property it publishes for a resource
// exists in DMTF's mockup of a 1U server for the same resource type, with the same JSON type, and the
// resource types agree. The few properties the mockup lacks are listed with the reason the emulator has them.
func TestEmulatorDocumentsAreShapedLikeTheDMTFMockup(t *testing.T) {
	c := startEmulator(t)
	// Properties the emulator publishes that this mockup's resources lack; any other difference fails.
	notInMockup := map[string]string{
		"ComputerSystem/Storage":     "the mockup models disks as SimpleStorage only; BMCs of this decade publish Storage (DMTF ComputerSystem v1_1+)",
		"ComputerSystem/PCIeDevices": "the mockup has no PCIe devices; the emulator publishes its GPUs there (DMTF ComputerSystem v1_10+)",
	}
	used := map[string]bool{}
	for _, pair := range []struct{ emulator, mockup string }{
		{"/redfish/v1", "/redfish/v1"},
		{"/redfish/v1/Systems", "/redfish/v1/Systems"},
		{"/redfish/v1/Systems/s1", "/redfish/v1/Systems/437XR1138R2"},
		{"/redfish/v1/Systems/s1/Processors/CPU0", "/redfish/v1/Systems/437XR1138R2/Processors/CPU1"},
		{"/redfish/v1/Systems/s1/Memory/DIMM0", "/redfish/v1/Systems/437XR1138R2/Memory/DIMM1"},
		{"/redfish/v1/Systems/s1/EthernetInterfaces/nic0", "/redfish/v1/Systems/437XR1138R2/EthernetInterfaces/12446A3B0411"},
		{"/redfish/v1/Managers/BMC", "/redfish/v1/Managers/BMC"},
		{"/redfish/v1/SessionService", "/redfish/v1/SessionService"},
	} {
		t.Run(pair.emulator, func(t *testing.T) {
			g := NewWithT(t)
			status, _, got := c.do(http.MethodGet, pair.emulator, "")
			g.Expect(status).To(Equal(http.StatusOK))
			want := readMockup(t, pair.mockup)
			typ := resourceType(got)
			g.Expect(typ).To(Equal(resourceType(want)), "@odata.type")
			var diffs []string
			compareShape(typ, got, want, notInMockup, used, &diffs)
			sort.Strings(diffs)
			g.Expect(diffs).To(BeEmpty())
		})
	}
	for p := range notInMockup {
		if !used[p] {
			t.Errorf("%s is listed as missing from the DMTF mockup but the comparison never met it: remove it from the list", p)
		}
	}
}

// resourceType is "ComputerSystem" of "#ComputerSystem.v1_20_0.ComputerSystem".
func resourceType(doc map[string]any) string {
	t, _ := doc["@odata.type"].(string)
	return strings.SplitN(strings.TrimPrefix(t, "#"), ".", 2)[0]
}

func compareShape(path string, got, want map[string]any, allowed map[string]string, used map[string]bool, diffs *[]string) {
	for k, gv := range got {
		p := path + "/" + k
		if k == "@odata.type" || k == "@odata.etag" || k == "Members@odata.count" && want["Members"] != nil {
			continue
		}
		wv, ok := want[k]
		if !ok {
			if _, listed := allowed[p]; !listed {
				*diffs = append(*diffs, p+": not in the DMTF mockup")
			}
			used[p] = true
			continue
		}
		if redfishsim.JSONType(gv) != redfishsim.JSONType(wv) {
			*diffs = append(*diffs, p+": "+redfishsim.JSONType(gv)+" here, "+redfishsim.JSONType(wv)+" in the DMTF mockup")
			continue
		}
		if gm, ok := gv.(map[string]any); ok {
			compareShape(p, gm, wv.(map[string]any), allowed, used, diffs)
		}
		// Members of arrays of objects (links, identifiers) against the mockup's first member.
		if ga, ok := gv.([]any); ok && len(ga) > 0 {
			if wa := wv.([]any); len(wa) > 0 {
				gm, gok := ga[0].(map[string]any)
				wm, wok := wa[0].(map[string]any)
				if gok && wok {
					compareShape(p+"[]", gm, wm, allowed, used, diffs)
				}
			}
		}
	}
}
