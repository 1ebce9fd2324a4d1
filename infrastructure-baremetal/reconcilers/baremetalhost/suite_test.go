package baremetalhost_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/harness"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/bootserver"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/liveiso"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

var env *envtest.Environment

// Most tests here wait (on power polls, provisioning timeouts, Consistently windows) in a namespace, an
// emulator, a boot lab and a controller of their own, so they run in parallel (t.Parallel). Each uses boot
// MACs no other test uses, since the controller checks a boot MAC against every namespace. The tests that
// read process-wide metrics as deltas (TestHostAndBMCMetrics, TestProvisionAttestDeprovision) stay serial:
// Go runs the serial tests first, alone, so no other test's hosts move those counters meanwhile. So does
// TestEnrolmentIsExplicit, whose 6 s provisioning timeout leaves no room for a loaded neighbour (beside
// other tests its one-shot read of a refused host's power found the attempt already timed out).
func TestMain(m *testing.M) {
	harness.Main(m, 60*time.Second, 100*time.Millisecond, harness.Metal3Only(), func(e *envtest.Environment) { env = e })
}

// startController runs the host controller in a manager of its own, limited to namespaces, so a test
// can kill it (in-flight Redfish calls and API writes are cut off) and start a fresh one, as after a
// crash.
func startController(t testing.TB, r *baremetalhost.Reconciler, namespaces ...string) *harness.Provider {
	t.Helper()
	return harness.StartProvider(t, env.Config, env.GetScheme(), func(ctx context.Context, mgr ctrl.Manager) error {
		r.Client = mgr.GetClient()
		r.Namespaces = namespaces
		return r.SetupWithManager(ctx, mgr, manager.Controllers{SkipNameValidation: true}.Options(controllerConcurrency))
	})
}

// testReconciler has short timers so failure paths finish in seconds.
func testReconciler(nb baremetalhost.NetBoot) *baremetalhost.Reconciler {
	return &baremetalhost.Reconciler{
		NetBoot:              nb,
		Boot:                 inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img", Cmdline: "console=ttyS0"},
		ProvisionTimeout:     20 * time.Second,
		MaxProvisionAttempts: 2,
		RetryInterval:        time.Second,
		PowerPollInterval:    time.Second,
	}
}

const (
	bmcUser = "admin"
	bmcPass = "s3cret"
)

func startSim(t testing.TB, driver redfishsim.PowerDriver) *redfishsim.Server {
	t.Helper()
	sim, err := redfishsim.Start(redfishsim.Options{Username: bmcUser, Password: bmcPass, Driver: driver})
	if err != nil {
		t.Fatalf("failed to start the Redfish emulator: %v", err)
	}
	t.Cleanup(sim.Close)
	return sim
}

// newHost creates a managed BareMetalHost for the emulated system id, with its credentials Secret.
func newHost(g Gomega, ns, name string, sim *redfishsim.Server, id, mac, password string, mutate ...func(*metal3v1.BareMetalHost)) *metal3v1.BareMetalHost {
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-bmc"},
		Data: map[string][]byte{"username": []byte(bmcUser), "password": []byte(password)}}
	g.Expect(env.Create(ctx, sec)).To(Succeed())
	h := &metal3v1.BareMetalHost{
		// The operator registers a new machine with an enrolment window: its first attested boot pins its TPM.
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{baremetalhost.ManagedLabel: "true"},
			Annotations: map[string]string{baremetalhost.EnrolmentWindowAnnotation: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}},
		Spec: metal3v1.BareMetalHostSpec{
			BMC:            metal3v1.BMCDetails{Address: sim.Address(id), CredentialsName: sec.Name},
			BootMACAddress: mac,
		},
	}
	for _, m := range mutate {
		m(h)
	}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	return h
}

// getHost reads the host from the API server (not a cache: tests read right after they write).
func getHost(g Gomega, h *metal3v1.BareMetalHost) *metal3v1.BareMetalHost {
	out := &metal3v1.BareMetalHost{}
	g.Expect(env.GetAPIReader().Get(context.Background(), client.ObjectKeyFromObject(h), out)).To(Succeed())
	return out
}

func state(h *metal3v1.BareMetalHost) func(Gomega) metal3v1.ProvisioningState {
	return func(g Gomega) metal3v1.ProvisioningState { return getHost(g, h).Status.Provisioning.State }
}

func condition(h *metal3v1.BareMetalHost, t string) func(Gomega) metav1.Condition {
	return func(g Gomega) metav1.Condition {
		for _, c := range getHost(g, h).Status.Conditions {
			if c.Type == t {
				return c
			}
		}
		return metav1.Condition{}
	}
}

// bootLab is the boot server side of provisioning, in process: the real attestation service (with
// AttestStore on the BareMetalHosts, recording Events) and the real boot HTTP server (iPXE scripts with
// one-time tickets) on loopback, plus the inventory the controller fills.
type bootLab struct {
	inv  *inventory.Static
	base string
	// isos is the boot server's live ISO cache, served under /live/ (the controller needs it for live-iso).
	isos *liveiso.Cache
}

// startBootLab is the boot server of a site whose own DHCP server leases the addresses while Yonder only
// adds boot options (proxyDHCP): scripts are served to whoever names a host's MAC.
func startBootLab(t testing.TB, c client.Client) *bootLab {
	t.Helper()
	return startBootLabWith(t, c, false)
}

// startLeasingBootLab is the boot server of a site where Yonder's DHCP server leases the addresses
// (bootserver.Config.BindToReservation): a host's script is served only to its reservation
// (annotation metal.yonder.dev/boot-address), and a host without one is served from anywhere.
func startLeasingBootLab(t testing.TB, c client.Client) *bootLab {
	t.Helper()
	return startBootLabWith(t, c, true)
}

func startBootLabWith(t testing.TB, c client.Client, bindToReservation bool) *bootLab {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	inv := inventory.NewStatic()
	// The hosts' swtpms have EK certificates from swtpm-localca: the site's TPM vendor root.
	root, intermediate, err := swtpm.LocalCA(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	roots, err := attest.LoadCertPool(root)
	if err != nil {
		t.Fatal(err)
	}
	intermediates, err := attest.LoadCertPool(intermediate)
	if err != nil {
		t.Fatal(err)
	}
	// Events as the manager records them: to the API server.
	events := record.NewBroadcaster()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubernetes.NewForConfigOrDie(env.Config).CoreV1().Events("")})
	t.Cleanup(events.Shutdown)
	store := baremetalhost.AttestStore{Client: c, Recorder: events.NewRecorder(env.GetScheme(), corev1.EventSource{Component: "yonder-metal-manager"})}
	svc := attest.New(attest.Config{EKRoots: roots, EKIntermediates: intermediates}, store, testr.NewWithInterface(t, testr.Options{}), nil)
	isos, err := liveiso.New(t.TempDir(), nil, testr.NewWithInterface(t, testr.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = isos.Close() })
	bs, err := bootserver.New(bootserver.Config{BaseURL: base, ArtifactsDir: t.TempDir(), Lookup: inv, Tickets: svc, API: svc.Handler(),
		LiveISOs: isos.Handler(), BindToReservation: bindToReservation}, testr.NewWithInterface(t, testr.Options{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: bs.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); _ = bs.Close() })
	return &bootLab{inv: inv, base: base, isos: isos}
}

// pxeHosts is a redfishsim power driver for hosts without firmware: a power-on with the one-time PXE
// override does, in process, what the QEMU host's iPXE and `yonder-agent attest` do over the network —
// fetch the host's iPXE script (one-time ticket) for its MAC and attest with the host's TPM, a real
// swtpm. A normal power-on boots nothing. The QEMU e2e runs the real firmware and agent.
type pxeHosts struct {
	t    testing.TB
	lab  *bootLab
	mu   sync.Mutex
	macs map[string]string
	tpms map[string]*swtpm.TPM
	// pxeBoots counts PXE boots; data records what each host received.
	pxeBoots map[string]int
	data     map[string][]string
	errs     map[string][]string
	// bootAs replaces what a host's PXE boot does (a misbehaving host); nil: fetch the script and attest.
	// It returns the released instructions, which the host then carries out as the ramdisk does.
	bootAs map[string]func(mac string, tpm *swtpm.TPM) ([]byte, error)
	// actions records the instructions' actions each host received; diskBoots counts boots from disk.
	actions   map[string][]string
	diskBoots map[string]int
	// metaData records the meta data of each host's instructions.
	metaData map[string][]string
	// powerOns and powerOffs count every power action the BMC carried out (a cycle is one of each).
	powerOns, powerOffs map[string]int
	// failWrites is how many of a host's next write-image, clean or run-node instructions it reports as failed.
	failWrites map[string]int
	// liveBoots counts the boots whose script SAN-booted a live ISO (which the host read as iPXE does).
	liveBoots map[string]int
	wg        sync.WaitGroup
}

func newPXEHosts(t testing.TB, lab *bootLab) *pxeHosts {
	t.Helper()
	p := &pxeHosts{t: t, lab: lab, macs: map[string]string{}, tpms: map[string]*swtpm.TPM{},
		pxeBoots: map[string]int{}, data: map[string][]string{}, errs: map[string][]string{},
		bootAs: map[string]func(string, *swtpm.TPM) ([]byte, error){}, actions: map[string][]string{},
		diskBoots: map[string]int{}, failWrites: map[string]int{}, metaData: map[string][]string{},
		powerOns: map[string]int{}, powerOffs: map[string]int{}, liveBoots: map[string]int{}}
	t.Cleanup(p.wg.Wait)
	return p
}

// add registers a host and gives it a fresh TPM (call again to swap the TPM: a changed machine).
func (p *pxeHosts) add(id, mac string) { p.addTPM(id, mac, swtpm.Start) }

// addTPM registers a host with a TPM that start manufactures in a directory of its own.
func (p *pxeHosts) addTPM(id, mac string, start func(context.Context, string) (*swtpm.TPM, error)) {
	dir, err := os.MkdirTemp("", "ybmh-tpm-")
	if err != nil {
		p.t.Fatal(err)
	}
	tpm, err := start(context.Background(), dir)
	if err != nil {
		p.t.Fatalf("failed to start swtpm: %v", err)
	}
	p.t.Cleanup(func() { _ = tpm.Stop(); _ = os.RemoveAll(dir) })
	p.mu.Lock()
	defer p.mu.Unlock()
	p.macs[id] = mac
	p.tpms[id] = tpm
}

func (p *pxeHosts) PowerOn(_ context.Context, id, target string) error {
	p.mu.Lock()
	p.powerOns[id]++
	p.mu.Unlock()
	if target == "Hdd" {
		p.mu.Lock()
		p.diskBoots[id]++
		p.mu.Unlock()
		return nil
	}
	if target != "Pxe" {
		return nil
	}
	p.mu.Lock()
	p.pxeBoots[id]++
	mac, tpm, boot := p.macs[id], p.tpms[id], p.bootAs[id]
	p.mu.Unlock()
	if boot == nil {
		boot = p.boot
	}
	if tpm == nil {
		return nil // a host whose NIC is not on the boot network: nothing answers
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		plain, err := boot(mac, tpm)
		if san := (sanBootError{}); errors.As(err, &san) {
			// The live ISO boots: nothing is released to it.
			if err := p.sanBoot(id, san.url); err != nil {
				p.mu.Lock()
				p.errs[id] = append(p.errs[id], err.Error())
				p.mu.Unlock()
			}
			return
		}
		var in *wire.Instructions
		if err == nil {
			in, err = wire.DecodeInstructions(plain)
		}
		if err == nil && in.Action != wire.ActionLive {
			err = p.report(id, in)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			p.errs[id] = append(p.errs[id], err.Error())
			return
		}
		p.data[id] = append(p.data[id], string(in.UserData))
		p.actions[id] = append(p.actions[id], in.Action)
		p.metaData[id] = append(p.metaData[id], string(in.MetaData))
	}()
	return nil
}

func (p *pxeHosts) PowerOff(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.powerOffs[id]++
	return nil
}

// power returns how many power-ons and power-offs a host's BMC carried out.
func (p *pxeHosts) power(id string) (ons, offs int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.powerOns[id], p.powerOffs[id]
}

// report is the ramdisk's report of a write-image, clean or run-node instruction (the work itself is the
// real agent's, in the QEMU e2e): a success, or a failure while failWrites says so.
func (p *pxeHosts) report(id string, in *wire.Instructions) error {
	p.mu.Lock()
	fail := p.failWrites[id] > 0
	if fail {
		p.failWrites[id]--
	}
	p.mu.Unlock()
	r := wire.Report{Host: in.Host, Token: in.ReportToken, Action: in.Action, Success: !fail, Device: "/dev/vda", Bytes: 1 << 20, Duration: "1s"}
	if fail {
		r.Message = "checksum mismatch: the image's sha256 is not the one named"
	}
	if in.Action == wire.ActionRunNode {
		r.Device, r.Bytes, r.Message = "", 0, "Node joined"
		if fail {
			r.Message = "the kubelet did not register the Node within 10m0s"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return (&wire.Client{Server: p.lab.base}).Report(ctx, r)
}

// disk returns a host's instruction actions and its boots from disk.
func (p *pxeHosts) disk(id string) (actions []string, diskBoots int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.actions[id]...), p.diskBoots[id]
}

func (p *pxeHosts) boot(mac string, tpm *swtpm.TPM) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	server, ticket, err := p.script(ctx, mac)
	if err != nil {
		return nil, err
	}
	return attestWith(ctx, server, ticket, tpm)
}

// script fetches the host's iPXE script as its firmware does and returns the server and ticket on its
// kernel line.
func (p *pxeHosts) script(ctx context.Context, mac string) (server, ticket string, err error) {
	return p.scriptVia(ctx, http.DefaultClient, mac)
}

// scriptVia fetches the iPXE script of mac with hc (from the address hc dials from).
func (p *pxeHosts) scriptVia(ctx context.Context, hc *http.Client, mac string) (server, ticket string, err error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.lab.base+"/ipxe/"+mac, nil)
	rsp, err := hc.Do(req)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = rsp.Body.Close() }()
	if rsp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(rsp.Body)
		return "", "", fmt.Errorf("iPXE script: HTTP %d: %s", rsp.StatusCode, b)
	}
	var kernel string
	sc := bufio.NewScanner(rsp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "kernel ") {
			kernel = sc.Text()
		}
		if f := strings.Fields(sc.Text()); len(f) > 0 && f[0] == "sanboot" {
			for _, w := range f[1:] {
				if strings.HasPrefix(w, "http://") {
					return "", "", sanBootError{url: w}
				}
			}
			return "", "", fmt.Errorf("iPXE script SAN-boots no http URL: %q", sc.Text())
		}
	}
	server, ticket = wire.ParseCmdline(kernel)
	if ticket == "" {
		return "", "", fmt.Errorf("iPXE script has no ticket: %q", kernel)
	}
	return server, ticket, nil
}

// sanBootError is a script that SAN-boots a live ISO instead of booting Yonder's ramdisk.
type sanBootError struct{ url string }

func (e sanBootError) Error() string { return "the iPXE script SAN-boots " + e.url }

// sanBoot reads the ISO as iPXE's HTTP SAN device does before the firmware boots it: its size, then
// blocks by range (the primary volume descriptor, the El Torito boot record), and counts the live boot.
func (p *pxeHosts) sanBoot(id, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range []string{"bytes=32768-34815", "bytes=34816-36863"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Range", r)
		rsp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, rsp.Body)
		_ = rsp.Body.Close()
		if rsp.StatusCode != http.StatusPartialContent {
			return fmt.Errorf("SAN boot of %s: range %s answered HTTP %d", url, r, rsp.StatusCode)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.liveBoots[id]++
	return nil
}

// attestWith is `yonder-agent attest` with the host's TPM.
func attestWith(ctx context.Context, server, ticket string, tpm *swtpm.TPM) ([]byte, error) {
	return attestVia(ctx, nil, server, ticket, tpm)
}

// attestVia is `yonder-agent attest` with tpm, talking through hc (nil: the default client).
func attestVia(ctx context.Context, hc *http.Client, server, ticket string, tpm *swtpm.TPM) ([]byte, error) {
	conn, err := wire.OpenTPM(tpm.Socket)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	keys, err := wire.LoadKeys(conn)
	if err != nil {
		return nil, err
	}
	defer func() { _ = keys.Close() }()
	return (&wire.Client{Server: server, HTTP: hc}).Attest(ctx, ticket, keys)
}

func (p *pxeHosts) snapshot(id string) (boots int, data, errs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pxeBoots[id], append([]string(nil), p.data[id]...), append([]string(nil), p.errs[id]...)
}

// controllerConcurrency is the workers of controllers started by startController (the manager's default
// is 10; functional tests use fewer so interleavings show).
var controllerConcurrency = 4

// patchHost changes a host's spec or metadata as a user (or CAPM3) would, retrying on conflicts. It reads
// from the API server, not the cache: right after another write the cache may still hold the object
// before it (a mutate that relies on that write, like one editing spec.image after claim, would see nil).
func patchHost(g Gomega, h *metal3v1.BareMetalHost, mutate func(*metal3v1.BareMetalHost)) {
	g.Eventually(func() error {
		cur := &metal3v1.BareMetalHost{}
		if err := env.GetAPIReader().Get(context.Background(), client.ObjectKeyFromObject(h), cur); err != nil {
			return err
		}
		mutate(cur)
		return env.Update(context.Background(), cur)
	}).Should(Succeed())
}
