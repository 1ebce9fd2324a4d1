package bootserver_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/bootserver"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/test/labnet"
)

func TestBootServerWithCurl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	client, err := n.Attach(ctx, "httpc")
	g.Expect(err).NotTo(HaveOccurred())
	// A stranger on the same boot LAN who knows (or guesses) the host's MAC.
	stranger, err := n.Attach(ctx, "rogue")
	g.Expect(err).NotTo(HaveOccurred())

	dir := t.TempDir()
	kernel := make([]byte, 5*1024*1024+3)
	_, _ = rand.Read(kernel)
	g.Expect(os.WriteFile(filepath.Join(dir, "vmlinuz"), kernel, 0o644)).To(Succeed())
	secret := filepath.Join(t.TempDir(), "secret")
	g.Expect(os.WriteFile(secret, []byte("outside"), 0o600)).To(Succeed())
	g.Expect(os.Symlink(secret, filepath.Join(dir, "escape"))).To(Succeed())

	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0xab, 0xcd, 0xef}
	injected := net.HardwareAddr{0x52, 0x54, 0x00, 0xab, 0xcd, 0x01}
	inv := inventory.NewStatic(inventory.Host{Name: "metal/host-0", MAC: mac, Address: client.Address,
		Boot: inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img", Cmdline: "console=ttyS0"}},
		// An image URL with a newline would add iPXE commands after the kernel line.
		inventory.Host{Name: "metal/host-1", MAC: injected, Boot: inventory.BootConfig{Kernel: "vmlinuz",
			Cmdline: "console=ttyS0 yonder.image=http://images.example/a.iso\nshell"}})
	ln, err := net.Listen("tcp4", n.Gateway.String()+":0")
	g.Expect(err).NotTo(HaveOccurred())
	base := "http://" + ln.Addr().String()
	svc := attest.New(attest.Config{InsecureAcceptAnyEK: true}, attest.NewMemoryStore(), testr.New(t), nil)
	metrics := bootserver.NewMetrics(prometheus.NewRegistry())
	bs, err := bootserver.New(bootserver.Config{BaseURL: base, ArtifactsDir: dir, Lookup: inv, Tickets: svc, API: svc.Handler(), BindToReservation: true},
		testr.New(t), metrics)
	g.Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{Handler: bs.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); _ = bs.Close() })

	curl := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + client.NamespacePath, "curl", "-sS"}, args...)...).CombinedOutput()
		return string(out), err
	}
	rogue := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + stranger.NamespacePath, "curl", "-sS"}, args...)...).CombinedOutput()
		return string(out), err
	}
	ticketRE := regexp.MustCompile(`yonder\.ticket=(\S+)`)

	t.Run("per-host iPXE script with a fresh one-time ticket", func(t *testing.T) {
		g := NewWithT(t)
		out, err := curl("--fail", base+"/ipxe/"+mac.String())
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(HavePrefix("#!ipxe\n"))
		g.Expect(out).To(ContainSubstring("kernel " + base + "/artifacts/vmlinuz initrd=initrd console=ttyS0 yonder.server=" + base + " yonder.ticket="))
		g.Expect(out).To(ContainSubstring("initrd --name initrd " + base + "/artifacts/initrd.img\n"))
		again, err := curl("--fail", base+"/ipxe/"+strings.ToUpper(mac.String()))
		g.Expect(err).NotTo(HaveOccurred(), again)
		g.Expect(ticketRE.FindStringSubmatch(again)[1]).NotTo(Equal(ticketRE.FindStringSubmatch(out)[1]))
	})
	t.Run("a stranger naming the host's MAC gets no script, and no ticket works from its address", func(t *testing.T) {
		g := NewWithT(t)
		out, err := rogue("-w", "\n%{http_code}", base+"/ipxe/"+mac.String())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(HavePrefix(bootserver.ReasonNotReservedAddress + ":"))
		g.Expect(out).To(HaveSuffix("\n403"))
		g.Expect(out).NotTo(ContainSubstring("yonder.ticket="))
		// The host's own ticket, were it overheard, opens no session from the stranger's address...
		script, err := curl("--fail", base+"/ipxe/"+mac.String())
		g.Expect(err).NotTo(HaveOccurred(), script)
		overheard := ticketRE.FindStringSubmatch(script)[1]
		body := `{"ticket":"` + overheard + `","ekPublic":"AA==","akPublic":"AA=="}`
		out, err = rogue("-w", "\n%{http_code}", "-X", "POST", "-d", body, base+"/attestation/v1/start")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(`"reason":"TicketBoundToAnotherAddress"`))
		g.Expect(out).To(HaveSuffix("\n403"))
		// ...and is still the host's: its (here malformed) request gets past the ticket check.
		out, err = curl("-w", "\n%{http_code}", "-X", "POST", "-d", body, base+"/attestation/v1/start")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(`"reason":"MalformedRequest"`))
		g.Expect(out).To(HaveSuffix("\n400"))
	})
	t.Run("a newline in the image URL never reaches a script", func(t *testing.T) {
		g := NewWithT(t)
		out, err := curl("-w", "\n%{http_code}", base+"/ipxe/"+injected.String())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(HavePrefix(inventory.ReasonInvalidBootParameter + ": kernel command line word 2 holds control character '\\n'"))
		g.Expect(out).To(HaveSuffix("\n500"))
		g.Expect(out).NotTo(ContainSubstring("shell"))
	})
	t.Run("unknown MAC gets no script", func(t *testing.T) {
		g := NewWithT(t)
		out, err := curl("-o", "/dev/null", "-w", "%{http_code}", base+"/ipxe/52:54:00:00:00:01")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal("404"))
	})
	checkArtifacts(t, curl, base, kernel)
	t.Run("attestation API is mounted and refuses with a reason", func(t *testing.T) {
		g := NewWithT(t)
		out, err := curl("-X", "POST", "-d", `{"ticket":"nope","ekPublic":"AA==","akPublic":"AA=="}`, base+"/attestation/v1/start")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(`"reason":"UnknownTicket"`))
		out, err = curl(base + "/bootstrap/v1/some-token")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(`"reason":"UnknownReleaseToken"`))
	})
	g.Expect(testutil.ToFloat64(metrics.Requests.WithLabelValues("ipxe", "200"))).To(Equal(3.0))
	g.Expect(testutil.ToFloat64(metrics.Requests.WithLabelValues("ipxe", "403"))).To(Equal(1.0))
	g.Expect(testutil.ToFloat64(metrics.Bytes.WithLabelValues("artifacts"))).To(BeNumerically(">=", len(kernel)))
}

// checkArtifacts downloads the kernel artifact as firmware and curl do: whole with its sha256 headers,
// by range and resumed; and tries to get out of the artifacts directory.
func checkArtifacts(t *testing.T, curl func(args ...string) (string, error), base string, kernel []byte) {
	t.Helper()
	sum := sha256.Sum256(kernel)
	t.Run("artifact with sha256 headers", func(t *testing.T) {
		g := NewWithT(t)
		dst := filepath.Join(t.TempDir(), "k")
		hdr, err := curl("--fail", "-D", "-", "-o", dst, base+"/artifacts/vmlinuz")
		g.Expect(err).NotTo(HaveOccurred(), hdr)
		got, _ := os.ReadFile(dst)
		g.Expect(sha256.Sum256(got)).To(Equal(sum))
		g.Expect(hdr).To(ContainSubstring("X-Checksum-Sha256: " + hex.EncodeToString(sum[:])))
		g.Expect(hdr).To(ContainSubstring("Repr-Digest: sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"))
		out, err := curl("--fail", base+"/artifacts/vmlinuz.sha256")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal(hex.EncodeToString(sum[:]) + "  vmlinuz\n"))
	})
	t.Run("range requests and resume", func(t *testing.T) {
		g := NewWithT(t)
		dst := filepath.Join(t.TempDir(), "part")
		code, err := curl("-r", "1000-1999", "-o", dst, "-w", "%{http_code}", base+"/artifacts/vmlinuz")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal("206"))
		got, _ := os.ReadFile(dst)
		g.Expect(got).To(Equal(kernel[1000:2000]))
		// Resume a cut download: curl -C - asks for the rest.
		g.Expect(os.WriteFile(dst, kernel[:4096], 0o600)).To(Succeed())
		_, err = curl("--fail", "-C", "-", "-o", dst, base+"/artifacts/vmlinuz")
		g.Expect(err).NotTo(HaveOccurred())
		got, _ = os.ReadFile(dst)
		g.Expect(sha256.Sum256(got)).To(Equal(sum))
	})
	t.Run("no way out of the artifacts directory", func(t *testing.T) {
		for _, p := range []string{"/artifacts/../../../../etc/passwd", "/artifacts/..%2f..%2f..%2fetc%2fpasswd", "/artifacts/escape", "/artifacts/"} {
			g := NewWithT(t)
			// -L: follow the mux's redirect of unclean paths to wherever it leads.
			out, err := curl("-L", "--path-as-is", "-w", "\n%{http_code}", base+p)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).NotTo(ContainSubstring("root:"), p)
			g.Expect(out).NotTo(ContainSubstring("outside"), p)
			g.Expect(out).To(Or(HaveSuffix("404"), HaveSuffix("400")), p)
		}
	})
}

// countingTickets is the real attestation service, counting the tickets it issues.
type countingTickets struct {
	*attest.Service
	issued atomic.Int32
}

func (c *countingTickets) IssueTicket(host string, from netip.Addr, leased bool) (string, error) {
	c.issued.Add(1)
	return c.Service.IssueTicket(host, from, leased)
}

// A provisioned host stays in the table lease-only (its OS keeps its DHCP lease): its MAC gets what an
// unknown MAC gets, 404 and no ticket, even asked from its own lease; the bootable host beside it is served
// as before, and the same host is served again once it is put back for a boot (provisioned anew).
func TestLeaseOnlyHostGetsNoScript(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("kernel"), 0o600)).To(Succeed())
	booting := net.HardwareAddr{0x52, 0x54, 0x00, 0xab, 0x00, 0x01}
	provisioned := net.HardwareAddr{0x52, 0x54, 0x00, 0xab, 0x00, 0x02}
	lease := netip.MustParseAddr("127.0.0.1") // both ask from their own reservation
	boot := inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img", Cmdline: "console=ttyS0"}
	inv := inventory.NewStatic(inventory.Host{Name: "metal/booting", MAC: booting, Address: lease, Boot: boot},
		inventory.Host{Name: "metal/provisioned", MAC: provisioned, Address: lease, Boot: boot, LeaseOnly: true})
	tickets := &countingTickets{Service: attest.New(attest.Config{InsecureAcceptAnyEK: true}, attest.NewMemoryStore(), testr.New(t), nil)}
	metrics := bootserver.NewMetrics(prometheus.NewRegistry())
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	bs, err := bootserver.New(bootserver.Config{BaseURL: base, ArtifactsDir: dir, Lookup: inv, Tickets: tickets, API: tickets.Handler(), BindToReservation: true},
		testr.New(t), metrics)
	g.Expect(err).NotTo(HaveOccurred())
	srv.Config.Handler = bs.Handler()
	srv.Start()
	t.Cleanup(func() { srv.Close(); _ = bs.Close() })
	get := func(mac string) (int, string) {
		rsp, err := http.Get(base + "/ipxe/" + mac)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = rsp.Body.Close() }()
		b, err := io.ReadAll(rsp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return rsp.StatusCode, string(b)
	}

	unknownCode, unknownBody := get("52:54:00:ab:00:99")
	g.Expect(unknownCode).To(Equal(http.StatusNotFound))
	code, body := get(provisioned.String())
	g.Expect(code).To(Equal(http.StatusNotFound))
	g.Expect(body).To(Equal(unknownBody), "a lease-only host is answered exactly as an unknown MAC")
	g.Expect(tickets.issued.Load()).To(BeZero(), "no ticket for a lease-only host")
	_, err = bs.ScriptFor(inventory.Host{Name: "metal/provisioned", MAC: provisioned, Address: lease, Boot: boot, LeaseOnly: true}, lease)
	g.Expect(err).To(MatchError(ContainSubstring("only keeps its DHCP lease")))
	g.Expect(tickets.issued.Load()).To(BeZero())

	code, body = get(booting.String())
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(body).To(ContainSubstring("yonder.ticket="))
	g.Expect(tickets.issued.Load()).To(Equal(int32(1)))

	// Provisioned anew (the controller puts the host back for a boot): its script is served again.
	inv.Set(inventory.Host{Name: "metal/provisioned", MAC: provisioned, Address: lease, Boot: boot})
	code, body = get(provisioned.String())
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(body).To(ContainSubstring("echo Yonder: booting metal/provisioned\n"))
	g.Expect(tickets.issued.Load()).To(Equal(int32(2)))
	g.Expect(testutil.ToFloat64(metrics.Requests.WithLabelValues("ipxe", "404"))).To(Equal(2.0))
	g.Expect(testutil.ToFloat64(metrics.Requests.WithLabelValues("ipxe", "200"))).To(Equal(2.0))
}

// leaseRecorder is a TicketIssuer that records whether each ticket was issued as the host's lease.
type leaseRecorder struct {
	mu     sync.Mutex
	leased map[string][]bool
}

func (l *leaseRecorder) IssueTicket(host string, _ netip.Addr, leased bool) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leased[host] = append(l.leased[host], leased)
	return "t", nil
}

// A script's ticket is leased — a fatal refusal in the session it opens counts against the host — only when
// this site's DHCP server leases the addresses (BindToReservation) and the script was asked for from the
// host's reservation. A host without a reservation, or any host where the site's own DHCP server leases
// (proxyDHCP: scripts are served to whoever names a MAC), gets unleased tickets.
func TestOnlyAScriptForTheHostsLeaseIssuesALeasedTicket(t *testing.T) {
	boot := inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img", Cmdline: "console=ttyS0"}
	reserved := net.HardwareAddr{0x52, 0x54, 0x00, 0xab, 0x01, 0x01}
	unreserved := net.HardwareAddr{0x52, 0x54, 0x00, 0xab, 0x01, 0x02}
	inv := inventory.NewStatic(inventory.Host{Name: "metal/reserved", MAC: reserved, Address: netip.MustParseAddr("127.0.0.1"), Boot: boot},
		inventory.Host{Name: "metal/unreserved", MAC: unreserved, Boot: boot})
	for _, tc := range []struct {
		name              string
		bindToReservation bool
		want              map[string][]bool
	}{
		{"Yonder's DHCP leases the addresses", true, map[string][]bool{"metal/reserved": {true}, "metal/unreserved": {false}}},
		{"proxyDHCP", false, map[string][]bool{"metal/reserved": {false}, "metal/unreserved": {false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tickets := &leaseRecorder{leased: map[string][]bool{}}
			srv := httptest.NewUnstartedServer(nil)
			base := "http://" + srv.Listener.Addr().String()
			bs, err := bootserver.New(bootserver.Config{BaseURL: base, ArtifactsDir: t.TempDir(), Lookup: inv, Tickets: tickets,
				BindToReservation: tc.bindToReservation}, testr.New(t), nil)
			g.Expect(err).NotTo(HaveOccurred())
			srv.Config.Handler = bs.Handler()
			srv.Start()
			t.Cleanup(func() { srv.Close(); _ = bs.Close() })
			for _, mac := range []net.HardwareAddr{reserved, unreserved} {
				rsp, err := http.Get(base + "/ipxe/" + mac.String()) // from 127.0.0.1, the reservation
				g.Expect(err).NotTo(HaveOccurred())
				_ = rsp.Body.Close()
				g.Expect(rsp.StatusCode).To(Equal(http.StatusOK))
			}
			g.Expect(tickets.leased).To(Equal(tc.want))
		})
	}
}

// A host running its live ISO is served a script that SAN-boots the ISO from this server (or a URL as
// given) and issues no ticket — the ISO attests nothing; the ISO itself is served under /live/ by the
// handler mounted there. A live ISO value that would add words to the iPXE command is refused.
func TestLiveISOScriptSANBootsWithoutATicket(t *testing.T) {
	g := NewWithT(t)
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0xab, 0x00, 0x31}
	lease := netip.MustParseAddr("127.0.0.1")
	inv := inventory.NewStatic(inventory.Host{Name: "metal/live", MAC: mac, Address: lease, Boot: inventory.BootConfig{LiveISO: "/live/0123.iso"}})
	tickets := &countingTickets{Service: attest.New(attest.Config{InsecureAcceptAnyEK: true}, attest.NewMemoryStore(), testr.New(t), nil)}
	metrics := bootserver.NewMetrics(prometheus.NewRegistry())
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	iso := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "iso:"+r.URL.Path) })
	bs, err := bootserver.New(bootserver.Config{BaseURL: base, ArtifactsDir: t.TempDir(), Lookup: inv, Tickets: tickets, API: tickets.Handler(),
		LiveISOs: iso, BindToReservation: true}, testr.New(t), metrics)
	g.Expect(err).NotTo(HaveOccurred())
	srv.Config.Handler = bs.Handler()
	srv.Start()
	t.Cleanup(func() { srv.Close(); _ = bs.Close() })
	get := func(path string) (int, string) {
		rsp, err := http.Get(base + path)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = rsp.Body.Close() }()
		b, err := io.ReadAll(rsp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return rsp.StatusCode, string(b)
	}

	code, body := get("/ipxe/" + mac.String())
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(body).To(Equal("#!ipxe\necho Yonder: booting metal/live\necho Yonder: booting its live ISO\n" +
		"sanboot --no-describe " + base + "/live/0123.iso || goto failed\n" +
		":failed\necho Yonder: the live ISO did not boot, retrying in 30s\nsleep 30\nreboot\n"))
	g.Expect(tickets.issued.Load()).To(BeZero(), "the ISO attests nothing: no ticket")
	code, body = get("/live/0123.iso")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(Equal("iso:/live/0123.iso"), "the live ISO handler serves /live/")
	g.Expect(testutil.ToFloat64(metrics.Requests.WithLabelValues("live", "200"))).To(Equal(1.0))

	script, err := bs.ScriptFor(inventory.Host{Name: "metal/live", MAC: mac, Boot: inventory.BootConfig{LiveISO: "https://images.example/a.iso"}}, lease)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(script).To(ContainSubstring("sanboot --no-describe https://images.example/a.iso || goto failed\n"), "a URL is used as given")
	_, err = bs.ScriptFor(inventory.Host{Name: "metal/live", MAC: mac, Boot: inventory.BootConfig{LiveISO: "/live/a.iso\nshell"}}, lease)
	g.Expect(err).To(MatchError(inventory.ErrInvalidBootParameter))
	g.Expect(tickets.issued.Load()).To(BeZero())
}
