package redfish_test

import (
	"strings"
	"testing"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
)

// FuzzParseAddress: spec.bmc.address is user input; whatever it holds, parsing never panics and an
// accepted address always yields an http(s) endpoint with a host and a ComputerSystem path (or none).
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"redfish://10.0.0.1/redfish/v1/Systems/1", "redfish+http://bmc:8000", "redfish+https://[::1]:8443/redfish/v1/Systems/a/",
		"ipmi://x", "redfish://", "redfish://h/redfish/v1/Systems/%zz", "redfish://u:p@h:1/redfish/v1/Systems/1?x#y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := redfish.ParseAddress(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(a.Endpoint, "https://") && !strings.HasPrefix(a.Endpoint, "http://") {
			t.Fatalf("%q: endpoint %q is not http(s)", s, a.Endpoint)
		}
		if len(strings.SplitN(a.Endpoint, "://", 2)[1]) == 0 {
			t.Fatalf("%q: endpoint %q has no host", s, a.Endpoint)
		}
		if a.SystemPath != "" && !strings.HasPrefix(a.SystemPath, "/redfish/v1/Systems/") {
			t.Fatalf("%q: system path %q", s, a.SystemPath)
		}
	})
}
