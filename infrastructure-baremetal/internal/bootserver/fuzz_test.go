package bootserver_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/bootserver"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
)

// FuzzBootHandlers sends arbitrary paths to the boot HTTP server and renders scripts from arbitrary boot
// parameters (image URL, checksum, kernel arguments as a BareMetalHost could carry them). A script is
// either refused or is exactly the five lines the server writes, with the kernel line's words being the
// command line's words followed by the server and the ticket: no value can add an iPXE command, a
// setting expansion or a chained command.
func FuzzBootHandlers(f *testing.F) {
	for _, seed := range []struct{ path, param string }{
		{"/ipxe/52:54:00:00:00:01", "http://images.example/a.iso"}, {"/ipxe/52-54-00-00-00-01", "x\nshell"},
		{"/artifacts/vmlinuz", "a b"}, {"/artifacts/../../etc/passwd", "${net0/mac}"}, {"/artifacts/vmlinuz.sha256", "a||b"},
		{"/ipxe/%00", "a&&b"}, {"/attestation/v1/start", "\x7f"}, {"/bootstrap/v1/x", "\u0085"}, {"/ipxe/zz", "'q'"},
	} {
		f.Add(seed.path, seed.param)
	}
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("kernel"), 0o600); err != nil {
		f.Fatal(err)
	}
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 1}
	inv := inventory.NewStatic()
	svc := attest.New(attest.Config{InsecureAcceptAnyEK: true, MaxTicketsPerHost: 1 << 30}, attest.NewMemoryStore(), logr.Discard(), nil)
	bs, err := bootserver.New(bootserver.Config{BaseURL: "http://192.0.2.1:8080", ArtifactsDir: dir, Lookup: inv, Tickets: svc, API: svc.Handler()}, logr.Discard(), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = bs.Close() })
	h := bs.Handler()
	f.Fuzz(func(t *testing.T, path, param string) {
		inv.Set(inventory.Host{Name: "metal/h", MAC: mac, Boot: inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img",
			Cmdline: "console=ttyS0 yonder.image=" + param}})
		if u, err := http.NewRequest(http.MethodGet, "http://192.0.2.1:8080/", nil); err == nil {
			u.URL.Path, u.RemoteAddr = path, "192.0.2.10:4000"
			h.ServeHTTP(httptest.NewRecorder(), u)
		}
		script, err := bs.ScriptFor(inventory.Host{Name: "metal/h", MAC: mac, Boot: inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img",
			Cmdline: "console=ttyS0 yonder.image=" + param}}, netip.MustParseAddr("192.0.2.10"))
		if err != nil {
			return
		}
		lines := strings.Split(script, "\n")
		if len(lines) != 6 || lines[5] != "" || lines[4] != "boot" || !strings.HasPrefix(lines[3], "initrd --name initrd ") {
			t.Fatalf("script is not the five lines the server writes: %q", script)
		}
		words := strings.Split(lines[2], " ")
		want := append([]string{"kernel", "http://192.0.2.1:8080/artifacts/vmlinuz", "initrd=initrd"},
			strings.Split(strings.Trim("console=ttyS0 yonder.image="+param+" yonder.server=http://192.0.2.1:8080", " "), " ")...)
		if len(words) != len(want)+1 || strings.Join(words[:len(want)], " ") != strings.Join(want, " ") || !strings.HasPrefix(words[len(want)], "yonder.ticket=") {
			t.Fatalf("the kernel line's words are not the parameters given: %q", lines[2])
		}
		for _, bad := range []string{"${", "||", "&&"} {
			if strings.Contains(lines[2], bad) {
				t.Fatalf("kernel line carries %q: %q", bad, lines[2])
			}
		}
	})
}
