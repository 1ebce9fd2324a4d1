package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/cachedir"
	"github.com/yonder-dev/yonder/test/metalboot"
	"github.com/yonder-dev/yonder/test/osimage"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// MetalPoolLabel is the label every bare-metal host of the stack carries (value "stack"): a
// YonderMetalMachineTemplate's hostSelector can pick the stack's hosts by it.
const MetalPoolLabel = "metal.yonder.dev/pool"

// metalSchemes add the bare-metal kinds to the management scheme (Scheme): Yonder's metal provider and
// Metal3's BareMetalHost. (Here, not in stack.go: each file may import only one provider API as infrav1.)
var metalSchemes = []func(*runtime.Scheme) error{infrav1.AddToScheme, metal3v1.AddToScheme}

// MetalHost is one bare-metal host of the stack: a QEMU VM (software emulation, SeaBIOS + iPXE, a
// software TPM) whose NIC is a tap on the lab bridge, behind a BMC of the Redfish emulator, registered
// as a BareMetalHost with its BMC Secret — as an operator writes them — in HostNamespace.
type MetalHost struct {
	// Name is the BareMetalHost's name and the emulator's system id.
	Name string
	// MAC is the VM's boot NIC (spec.bootMACAddress).
	MAC string
	// BootAddress is the address the manager's DHCP server reserves for it (annotation metal.yonder.dev/boot-address).
	BootAddress netip.Addr
	// Tap is the VM NIC's tap device on the lab bridge.
	Tap string
	// BMCAddress is spec.bmc.address (redfish://…).
	BMCAddress string
	// BMCSecret is the Secret (username, password) spec.bmc.credentialsName names.
	BMCSecret string
}

// metal is the stack's bare-metal site: the Redfish emulator and its QEMU power driver.
type metal struct {
	bootDir string
	// ekCADir holds the VMs' EK certificate CAs (--ek-roots, --ek-intermediates) and signingKey, the
	// manager's --boot-signing-key.
	ekCADir, signingKey string
	driver              *redfishsim.QEMUDriver
	sim                 *redfishsim.Server
	hosts               []*MetalHost
	// httpPort is the boot HTTP server's port; image is the cloud OS image served from bootDir
	// (Options.MetalDiskImage).
	httpPort int
	image    *osimage.Image
}

// The bare-metal hosts' sizes with Options.MetalDiskImage. The disk holds the 1.5 GiB image, which
// cloud-init grows into the disk, the agent's state (node image, rootfs, containers: ≥ 2 GiB free, its
// preflight checks) and the config drive at the end. The memory: the provisioning ramdisk spools the qcow2
// in its tmpfs (half the memory) before converting it, and the node runs systemd, containerd, the kubelet
// and pods; QEMU allocates it only as the guest uses it. The CPUs: a node's boot, cloud-init, the agent
// and the kubelet run in parallel, and TCG gives each virtual CPU its own host thread.
const (
	MetalDiskBytes     = 8 << 30
	MetalNodeMemoryMiB = 3072
	metalNodeCPUs      = 2
	metalLiveMemoryMiB = 512
)

// MetalImageName is the cloud OS image's name under the boot server's /artifacts/.
const MetalImageName = "debian-cloud.qcow2"

// metalBMCUser and metalBMCPassword are the emulator's credentials (in the BMC Secrets).
const (
	metalBMCUser     = "admin"
	metalBMCPassword = "yonder-lab-bmc" //nolint:gosec // the emulator's fixed test credential, not a secret
)

// prepareMetal checks the tools the VMs need and builds the provisioning kernel + initramfs into the
// directory the metal manager serves (--boot-artifacts-dir).
func (s *Stack) prepareMetal(ctx context.Context) error {
	for _, need := range []string{"qemu-system-x86_64", "swtpm", "swtpm_setup"} {
		if _, err := exec.LookPath(need); err != nil {
			return fmt.Errorf("%s is missing: run `hack/test-bins.sh --packages` (installs qemu-system-x86, swtpm, ipxe): %w", need, err)
		}
	}
	if _, err := os.Stat("/usr/lib/ipxe/virtio-net.rom"); err != nil {
		return fmt.Errorf("the iPXE option ROM is missing: run `hack/test-bins.sh --packages` (installs ipxe-qemu): %w", err)
	}
	s.metal = &metal{bootDir: filepath.Join(s.Dir, "boot"), ekCADir: filepath.Join(s.Dir, "ek-ca")}
	if err := os.MkdirAll(s.metal.bootDir, 0o750); err != nil {
		return fmt.Errorf("failed to create the boot artifacts directory: %w", err)
	}
	if err := s.metal.copyEKCA(ctx); err != nil {
		return err
	}
	// The provider's signing key: the manager signs released data and serves the public half beside the
	// boot image, which is the generic one a release ships (no key built in), as on a user's site.
	key, _, err := metalboot.GenerateSigningKey(s.metal.ekCADir)
	if err != nil {
		return err
	}
	s.metal.signingKey = key
	if s.opts.MetalDiskImage {
		img, err := osimage.Cached(ctx, osimage.Options{})
		if err != nil {
			return err
		}
		if err := cachedir.Place(img.QCOW2, filepath.Join(s.metal.bootDir, MetalImageName), true); err != nil {
			return fmt.Errorf("failed to serve the cloud OS image: %w", err)
		}
		s.metal.image = &img
	}
	return metalboot.Build(ctx, s.metal.bootDir)
}

// MetalImageEnv returns the clusterctl variables that make the metal flavors write the served cloud OS
// image to a host's disk (Options.MetalDiskImage): its URL on the boot server, qcow2, its SHA-256, and
// automatedCleaningMode metadata, so a released host's disk is wiped. Nil without MetalDiskImage.
func (s *Stack) MetalImageEnv() []string {
	if s.metal == nil || s.metal.image == nil {
		return nil
	}
	return s.metal.imageEnv(s.Net.Gateway.String(), MetalImageName, *s.metal.image)
}

// ServeMetalImage serves another disk image beside the stack's own, as name under the boot server's
// /artifacts/ (a plain file name), and returns the clusterctl variables that make the metal flavors write it
// (MetalImageEnv's, for this image): a test that needs hosts with other software — kubeadm's, for CABPK's
// workers — provisions them as a user does with the image image-builder made for them.
func (s *Stack) ServeMetalImage(name string, img osimage.Image) ([]string, error) {
	if s.metal == nil || s.metal.httpPort == 0 {
		return nil, errors.New("the stack has no bare-metal boot server (Options.MetalHosts)")
	}
	if name == "" || name == MetalImageName || filepath.Base(name) != name || name[0] == '.' {
		return nil, fmt.Errorf("image name %q is not a plain file name other than %s", name, MetalImageName)
	}
	if err := cachedir.Place(img.QCOW2, filepath.Join(s.metal.bootDir, name), true); err != nil {
		return nil, fmt.Errorf("failed to serve disk image %s: %w", name, err)
	}
	return s.metal.imageEnv(s.Net.Gateway.String(), name, img), nil
}

// imageEnv are the clusterctl variables for a qcow2 image served from the boot directory as name.
func (m *metal) imageEnv(gateway, name string, img osimage.Image) []string {
	return []string{
		fmt.Sprintf("YONDER_METAL_IMAGE_URL=http://%s/artifacts/%s", net.JoinHostPort(gateway, strconv.Itoa(m.httpPort)), name),
		"YONDER_METAL_IMAGE_FORMAT=qcow2",
		"YONDER_METAL_IMAGE_CHECKSUM=" + img.QCOW2SHA256,
		"YONDER_METAL_IMAGE_CHECKSUM_TYPE=sha256",
		"YONDER_METAL_CLEANING_MODE=metadata",
	}
}

// MetalImagePath returns the cloud OS image file the boot server serves as MetalImageName
// (Options.MetalDiskImage), for a test that measures other tools on the very file the hosts write; "" without one.
func (s *Stack) MetalImagePath() string {
	if s.metal == nil || s.metal.image == nil {
		return ""
	}
	return filepath.Join(s.metal.bootDir, MetalImageName)
}

// FreezeMetal stops a bare-metal host's VM without powering it off (redfishsim.QEMUDriver.Freeze): the
// host hangs until its BMC power-cycles it.
func (s *Stack) FreezeMetal(name string) error {
	if s.metal == nil || s.metal.driver == nil {
		return fmt.Errorf("the stack has no bare-metal hosts")
	}
	return s.metal.driver.Freeze(name)
}

// MetalDisk returns the path of a bare-metal host's disk file ("" without one).
func (s *Stack) MetalDisk(name string) string {
	if s.metal == nil || s.metal.driver == nil {
		return ""
	}
	return s.metal.driver.DiskPath(name)
}

// copyEKCA gives the metal manager the vendor roots of the VMs' TPMs, swtpm-localca's root and issuing CA,
// copied where the manager, which does not run as root, can read them.
func (m *metal) copyEKCA(ctx context.Context) error {
	root, intermediate, err := swtpm.LocalCA(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.ekCADir, 0o755); err != nil { //nolint:gosec // public CA certificates
		return fmt.Errorf("failed to create the EK CA directory: %w", err)
	}
	for _, f := range []string{root, intermediate} {
		data, err := os.ReadFile(f) //nolint:gosec // swtpm-localca's fixed paths
		if err != nil {
			return fmt.Errorf("failed to read swtpm-localca's CA: %w", err)
		}
		if err := os.WriteFile(filepath.Join(m.ekCADir, filepath.Base(f)), data, 0o644); err != nil { //nolint:gosec // a public CA certificate
			return fmt.Errorf("failed to copy swtpm-localca's CA: %w", err)
		}
	}
	return nil
}

// metalInitEnv are the clusterctl variables that configure the metal manager's boot services on the lab
// bridge — what an operator sets for `clusterctl init --infrastructure yonder-metal`.
func (s *Stack) metalInitEnv() ([]string, error) {
	_, httpPort, err := s.freeAddr()
	if err != nil {
		return nil, err
	}
	s.metal.httpPort = httpPort
	return []string{
		"YONDER_BOOT_INTERFACE=" + s.Net.Bridge,
		"YONDER_BOOT_SERVER_IP=" + s.Net.Gateway.String(),
		fmt.Sprintf("YONDER_BOOT_HTTP_PORT=%d", httpPort),
		// The lab bridge's address is the hosts' gateway, as a site's router would be: a host that boots
		// its disk keeps its lease, and a kubelet without --node-ip takes the default route's address.
		"YONDER_BOOT_ROUTER=" + s.Net.Gateway.String(),
		"YONDER_BOOT_ARTIFACTS_DIR=" + s.metal.bootDir,
		// TCG boots take about a minute; a VM that has not attested in 6 is not going to.
		"YONDER_PROVISION_TIMEOUT=6m",
		// The VMs' swtpms are manufactured with EK certificates from swtpm-localca: its CA is the vendor root.
		"YONDER_EK_ROOTS=" + filepath.Join(s.metal.ekCADir, "swtpm-localca-rootca-cert.pem"),
		"YONDER_EK_INTERMEDIATES=" + filepath.Join(s.metal.ekCADir, "issuercert.pem"),
		"YONDER_BOOT_SIGNING_KEY=" + s.metal.signingKey,
	}, nil
}

// startMetal creates the VMs' taps, the emulator and its systems, and registers each host as a
// BareMetalHost; it returns when every host is available (registered and inspected over Redfish).
func (s *Stack) startMetal(ctx context.Context) error {
	m := s.metal
	m.driver = redfishsim.NewQEMUDriver(filepath.Join(s.Dir, "metal"))
	ln, err := net.Listen("tcp4", net.JoinHostPort(s.Net.Gateway.String(), "0"))
	if err != nil {
		return fmt.Errorf("failed to listen for the Redfish emulator: %w", err)
	}
	if m.sim, err = redfishsim.Start(redfishsim.Options{Username: metalBMCUser, Password: metalBMCPassword, Driver: m.driver, Listener: ln}); err != nil {
		_ = ln.Close()
		return err
	}
	for i := range s.opts.MetalHosts {
		// Link names with the network's host prefix: labnet removes them with a crashed holder's leftovers.
		// Slots are at most labnet.MaxSlot (250) and i below 20 (Start checks): both fit a byte.
		h := &MetalHost{
			Name: fmt.Sprintf("metal-%d", i), Tap: fmt.Sprintf("yv%dhm%d", s.Net.Slot, i),
			MAC:         net.HardwareAddr{0x52, 0x54, 0x00, 0x6e, byte(s.Net.Slot), byte(i)}.String(), //nolint:gosec // bounded above
			BootAddress: netip.AddrFrom4([4]byte{10, 250, byte(s.Net.Slot), byte(200 + i)}),           //nolint:gosec // bounded above
		}
		h.BMCSecret = h.Name + "-bmc"
		if err := s.addTap(ctx, h.Tap); err != nil {
			return err
		}
		sys := redfishsim.QEMUSystem{Tap: h.Tap, MAC: h.MAC, MemoryMiB: metalLiveMemoryMiB}
		if m.image != nil {
			sys.MemoryMiB, sys.CPUs, sys.Disk, sys.DiskSizeBytes = MetalNodeMemoryMiB, metalNodeCPUs, filepath.Join(s.Dir, h.Name+"-disk.raw"), MetalDiskBytes
		}
		if err := m.driver.Add(ctx, h.Name, sys); err != nil {
			return err
		}
		m.sim.AddSystem(redfishsim.DefaultSystem(h.Name, h.MAC))
		h.BMCAddress = m.sim.Address(h.Name)
		m.hosts = append(m.hosts, h)
		if err := s.registerMetalHost(ctx, h); err != nil {
			return err
		}
	}
	return WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		for _, h := range m.hosts {
			bmh := &metal3v1.BareMetalHost{}
			if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.HostNamespace, Name: h.Name}, bmh); err != nil {
				return false, err
			}
			if bmh.Status.Provisioning.State != metal3v1.StateAvailable {
				return false, nil
			}
		}
		return true, nil
	})
}

// addTap creates a tap device on the lab bridge.
func (s *Stack) addTap(ctx context.Context, tap string) error {
	for _, args := range [][]string{{"tuntap", "add", "dev", tap, "mode", "tap"}, {"link", "set", tap, "master", s.Net.Bridge}, {"link", "set", tap, "up"}} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("failed to create tap %s on %s: %s: %w", tap, s.Net.Bridge, out, err)
		}
	}
	s.Net.OnClose(func() error {
		if out, err := exec.Command("ip", "link", "del", tap).CombinedOutput(); err != nil { //nolint:noctx // teardown
			return fmt.Errorf("failed to remove tap %s: %s: %w", tap, out, err)
		}
		return nil
	})
	return nil
}

// registerMetalHost writes the BMC Secret and the BareMetalHost an operator would: BMC address and
// credentials, boot MAC, the DHCP reservation, the label that hands the host to Yonder, and an enrolment
// window (the lab's hosts are new machines whose TPMs are pinned by their first attested boot).
func (s *Stack) registerMetalHost(ctx context.Context, h *MetalHost) error {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.HostNamespace, Name: h.BMCSecret},
		Data: map[string][]byte{"username": []byte(metalBMCUser), "password": []byte(metalBMCPassword)}}
	if err := s.Client.Create(ctx, sec); err != nil {
		return fmt.Errorf("failed to create BMC Secret %s: %w", sec.Name, err)
	}
	bmh := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Namespace: s.HostNamespace, Name: h.Name,
		Labels: map[string]string{baremetalhost.ManagedLabel: "true", MetalPoolLabel: "stack"},
		Annotations: map[string]string{baremetalhost.BootAddressAnnotation: h.BootAddress.String(),
			baremetalhost.EnrolmentWindowAnnotation: time.Now().Add(MetalEnrolmentWindow).UTC().Format(time.RFC3339)}},
		Spec: metal3v1.BareMetalHostSpec{BMC: metal3v1.BMCDetails{Address: h.BMCAddress, CredentialsName: sec.Name}, BootMACAddress: h.MAC}}
	if err := s.Client.Create(ctx, bmh); err != nil {
		return fmt.Errorf("failed to create BareMetalHost %s: %w", h.Name, err)
	}
	return nil
}

// MetalEnrolmentWindow is how long a lab host's enrolment window stays open after registration: its
// first provisioning must attest within it.
const MetalEnrolmentWindow = 24 * time.Hour

// MetalHosts returns the stack's bare-metal hosts.
func (s *Stack) MetalHosts() []*MetalHost {
	if s.metal == nil {
		return nil
	}
	return s.metal.hosts
}

// MetalRunning reports whether a bare-metal host's VM runs.
func (s *Stack) MetalRunning(name string) bool {
	return s.metal != nil && s.metal.driver != nil && s.metal.driver.Running(name)
}

// MetalConsole returns what a bare-metal host's VM wrote to its serial console ("" before its first boot).
func (s *Stack) MetalConsole(name string) string {
	if s.metal == nil || s.metal.driver == nil {
		return ""
	}
	b, _ := os.ReadFile(s.metal.driver.ConsoleLog(name))
	return string(b)
}

// MetalPXEBoots returns how many one-time PXE boots a host's BMC was asked for.
func (s *Stack) MetalPXEBoots(name string) int {
	if s.metal == nil || s.metal.sim == nil {
		return 0
	}
	return s.metal.sim.State(name).PXEBoots
}

// stopMetal powers every VM off (QEMU and swtpm end) and stops the emulator; the taps go with the network.
func (s *Stack) stopMetal() error {
	if s.metal == nil {
		return nil
	}
	var errs []error
	if s.metal.driver != nil {
		s.metal.driver.Close()
		for _, h := range s.metal.hosts {
			if s.metal.driver.Running(h.Name) {
				errs = append(errs, fmt.Errorf("failed to stop the VM of %s", h.Name))
			}
		}
	}
	if s.metal.sim != nil {
		s.metal.sim.Close()
	}
	return errors.Join(errs...)
}

// InstallMetal3CRDs applies the release's metal3-crds.yaml (Metal3's BareMetalHost CRD) unless the
// management cluster has that CRD already, as an operator without Metal3 does before `clusterctl init
// --infrastructure yonder-metal`, and waits until it is established.
func (s *Stack) InstallMetal3CRDs(ctx context.Context) error {
	return s.applyManifest(ctx, filepath.Join(s.releaseDir(), "infrastructure-baremetal", "metal3-crds.yaml"))
}

// applyManifest creates the objects of a YAML file the release wrote, in the file's order (keeping those
// that exist), and waits until each CRD among them is established.
func (s *Stack) applyManifest(ctx context.Context, file string) error {
	data, err := os.ReadFile(filepath.Clean(file))
	if err != nil {
		return fmt.Errorf("failed to read the release's manifest (make release-manifests writes it): %w", err)
	}
	objs, err := decodeYAML(data)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := s.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if err := WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
			if err := s.Client.Get(ctx, client.ObjectKey{Name: o.GetName()}, crd); err != nil {
				return false, nil //nolint:nilerr // not visible yet
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == string(apiextensionsv1.Established) && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return fmt.Errorf("CRD %s was not established: %w", o.GetName(), err)
		}
	}
	return nil
}

// decodeYAML decodes a multi-document YAML stream into objects.
func decodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("failed to decode YAML: %w", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
