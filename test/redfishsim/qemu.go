package redfishsim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/yonder-dev/yonder/pkg/deathsig"
)

// QEMUSystem is one emulated server behind the QEMU driver.
type QEMUSystem struct {
	// Tap is an existing tap device (on the boot network's bridge) the VM's NIC uses; MAC its address.
	Tap, MAC string
	// MemoryMiB of the VM (default 512: the agent's initramfs runs in RAM).
	MemoryMiB int
	// CPUs of the VM (default 1). TCG runs each virtual CPU on its own host thread, so a guest that runs
	// a whole node (containerd, the kubelet, cloud-init) gets a second host core where there is one.
	CPUs int
	// Disk is the raw file that is the system's disk, attached as virtio-blk-pci ("": no disk, a host
	// that can only boot from the network). Add creates it, sparse, of DiskSizeBytes when it does not exist;
	// an existing file is used as it is (a test may have written an image into it).
	Disk string
	// DiskSizeBytes of a disk Add creates (default 2 GiB: room for a small image and its config drive).
	DiskSizeBytes int64
	// DiskSerial is the disk's serial number as the guest reads it (/sys/block/vda/serial,
	// rootDeviceHints' serialNumber); virtio-blk holds at most 20 bytes. Default "D-<system id>", as
	// DefaultSystem's Redfish drive reports it.
	DiskSerial string
}

// DefaultDiskSizeBytes is the size of a disk the driver creates when QEMUSystem.DiskSizeBytes is 0.
const DefaultDiskSizeBytes = 2 << 30

// maxVirtioBlkSerial is VIRTIO_BLK_ID_BYTES: QEMU truncates a longer serial, which would then not match.
const maxVirtioBlkSerial = 20

// QEMUDriver is a PowerDriver whose systems are QEMU VMs (software emulation): power on starts the VM —
// network boot (SeaBIOS + iPXE option ROM) when the boot override asked for "Pxe", else from the disk
// ("Hdd" or no override: SeaBIOS reads the disk's MBR; a system without a disk halts in the firmware) —
// with a software TPM (swtpm, `-tpmdev emulator`) whose state outlives power cycles, as a soldered TPM does;
// power off kills the VM. The boot device is chosen with QEMU's `-boot` (the firmware's CMOS boot order):
// no device has a bootindex, which would take precedence over it.
type QEMUDriver struct {
	// Dir holds each system's TPM state, console log and firmware log.
	Dir string
	// IPXEROM is the NIC option ROM (default /usr/lib/ipxe/virtio-net.rom).
	IPXEROM string

	mu      sync.Mutex
	systems map[string]QEMUSystem
	running map[string]*vm
}

type vm struct {
	qemu, swtpm *exec.Cmd
	done        chan struct{}
}

// NewQEMUDriver returns a driver keeping its files under dir.
func NewQEMUDriver(dir string) *QEMUDriver {
	return &QEMUDriver{Dir: dir, IPXEROM: "/usr/lib/ipxe/virtio-net.rom", systems: map[string]QEMUSystem{}, running: map[string]*vm{}}
}

// Add registers a system, creates its disk file when it has none yet, and manufactures its TPM
// (swtpm_setup, EK with certificate).
func (d *QEMUDriver) Add(ctx context.Context, id string, s QEMUSystem) error {
	if s.Disk != "" {
		if err := prepareDisk(id, &s); err != nil {
			return err
		}
	}
	state := filepath.Join(d.Dir, id, "tpm")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return fmt.Errorf("failed to create TPM state of %s: %w", id, err)
	}
	out, err := exec.CommandContext(ctx, "swtpm_setup", "--tpm2", "--create-ek-cert", "--tpmstate", state, "--overwrite",
		"--pcr-banks", "sha256", "--logfile", filepath.Join(d.Dir, id, "swtpm-setup.log")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("failed to manufacture the TPM of %s: %w: %s", id, err, out)
	}
	if s.CPUs == 0 {
		s.CPUs = 1
	}
	if s.MemoryMiB == 0 {
		s.MemoryMiB = 512
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.systems[id] = s
	return nil
}

// prepareDisk validates a system's disk settings and creates its file when missing.
func prepareDisk(id string, s *QEMUSystem) error {
	if s.DiskSizeBytes == 0 {
		s.DiskSizeBytes = DefaultDiskSizeBytes
	}
	if s.DiskSerial == "" {
		s.DiskSerial = "D-" + id
	}
	if len(s.DiskSerial) > maxVirtioBlkSerial || strings.ContainsAny(s.DiskSerial, ", \t\n") {
		return fmt.Errorf("disk serial %q of %s: at most %d bytes, no commas or blanks (a virtio-blk serial)", s.DiskSerial, id, maxVirtioBlkSerial)
	}
	if s.DiskSizeBytes < 0 || s.DiskSizeBytes%512 != 0 {
		return fmt.Errorf("disk size %d of %s is not a positive multiple of 512 bytes", s.DiskSizeBytes, id)
	}
	if strings.Contains(s.Disk, ",") {
		// QEMU's -drive option syntax would split the path.
		return fmt.Errorf("disk path %q of %s contains a comma", s.Disk, id)
	}
	if _, err := os.Stat(s.Disk); err == nil {
		return nil
	}
	f, err := os.OpenFile(s.Disk, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("failed to create the disk of %s: %w", id, err)
	}
	// Truncate extends the file without writing: a sparse 2 GiB disk costs no space until written.
	if err := f.Truncate(s.DiskSizeBytes); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to size the disk of %s: %w", id, err)
	}
	return f.Close()
}

// DiskPath is the path of a system's disk file ("" when it has none or is unknown), for tests that inspect
// what was written to it.
func (d *QEMUDriver) DiskPath(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.systems[id].Disk
}

// ConsoleLog is the path of a system's serial console log.
func (d *QEMUDriver) ConsoleLog(id string) string { return filepath.Join(d.Dir, id, "console.log") }

// EarlierConsoleLog is the path of the serial console of a system's earlier boots, oldest first: QEMU
// truncates the console log at every start, and a test may need what a boot printed before a power cycle
// (the provisioning ramdisk's lines, once the host boots its disk).
func (d *QEMUDriver) EarlierConsoleLog(id string) string {
	return filepath.Join(d.Dir, id, "console-earlier-boots.log")
}

// keepConsole appends the console log of the last boot, if any, to EarlierConsoleLog.
func (d *QEMUDriver) keepConsole(id string) error {
	last, err := os.ReadFile(d.ConsoleLog(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	f, err := os.OpenFile(d.EarlierConsoleLog(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(last)
	return errors.Join(err, f.Close())
}

// FirmwareLog is the path of a system's SeaBIOS debug log.
func (d *QEMUDriver) FirmwareLog(id string) string { return filepath.Join(d.Dir, id, "seabios.log") }

// Running reports whether a system's VM runs.
func (d *QEMUDriver) Running(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.running[id]
	if !ok {
		return false
	}
	select {
	case <-v.done:
		return false
	default:
		return true
	}
}

// PowerOn implements PowerDriver.
func (d *QEMUDriver) PowerOn(ctx context.Context, id, target string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.systems[id]
	if !ok {
		return fmt.Errorf("no QEMU system %s", id)
	}
	if v, ok := d.running[id]; ok {
		select {
		case <-v.done:
		default:
			return nil
		}
	}
	dir := filepath.Join(d.Dir, id)
	if err := d.keepConsole(id); err != nil {
		return fmt.Errorf("failed to keep the console log of %s's last boot: %w", id, err)
	}
	ctrl := filepath.Join(dir, "swtpm-ctrl.sock")
	_ = os.Remove(ctrl)
	sw := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+filepath.Join(dir, "tpm"),
		"--ctrl", "type=unixio,path="+ctrl, "--terminate", "--log", "file="+filepath.Join(dir, "swtpm.log")+",level=1")
	sw.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	swtpmChild, err := deathsig.Start(sw)
	if err != nil {
		return fmt.Errorf("failed to start swtpm for %s: %w", id, err)
	}
	// QEMU's -tpmdev needs swtpm's control socket; give swtpm up to 2 s to create it (QEMU reports a
	// missing socket itself, so the wait's own timeout is not an error here).
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(ctrl)
		return err == nil, nil
	})
	boot := "c" // the first hard disk: "Hdd", and the normal boot order of a server provisioned to disk
	switch target {
	case "Pxe":
		boot = "n"
	case "Cd":
		boot = "d" // no optical drive is emulated: the firmware finds nothing, as on a server without one
	}
	args := []string{"-machine", "pc,accel=tcg", "-m", fmt.Sprint(s.MemoryMiB), "-smp", fmt.Sprint(s.CPUs),
		"-display", "none", "-nodefaults", "-no-reboot", "-boot", boot,
		"-netdev", "tap,id=n0,ifname=" + s.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,disable-legacy=on,netdev=n0,mac=" + s.MAC + ",romfile=" + d.IPXEROM,
		"-chardev", "socket,id=chrtpm,path=" + ctrl, "-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-tis,tpmdev=tpm0",
		"-serial", "file:" + d.ConsoleLog(id),
		"-debugcon", "file:" + d.FirmwareLog(id), "-global", "isa-debugcon.iobase=0x402"}
	if s.Disk != "" {
		args = append(args, "-drive", "file="+s.Disk+",format=raw,if=none,id=disk0,discard=unmap",
			"-device", "virtio-blk-pci,drive=disk0,serial="+s.DiskSerial)
	}
	q := exec.Command("qemu-system-x86_64", args...)
	log, err := os.Create(filepath.Join(dir, "qemu.log")) //nolint:gosec // the driver's own directory
	if err != nil {
		_ = sw.Process.Kill()
		return fmt.Errorf("failed to create QEMU log for %s: %w", id, err)
	}
	q.Stdout, q.Stderr = log, log
	q.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	qemuChild, err := deathsig.Start(q)
	if err != nil {
		_ = log.Close()
		_ = sw.Process.Kill()
		return fmt.Errorf("failed to start QEMU for %s: %w", id, err)
	}
	v := &vm{qemu: q, swtpm: sw, done: make(chan struct{})}
	go func() {
		<-qemuChild.Done()
		_ = log.Close()
		// --terminate ends swtpm when QEMU closes the control channel; make sure of it.
		_ = syscall.Kill(sw.Process.Pid, syscall.SIGTERM)
		<-swtpmChild.Done()
		close(v.done)
	}()
	d.running[id] = v
	return nil
}

// PowerOff implements PowerDriver: a forced off, the VM is killed.
func (d *QEMUDriver) PowerOff(_ context.Context, id string) error {
	d.mu.Lock()
	v, ok := d.running[id]
	delete(d.running, id)
	d.mu.Unlock()
	if !ok {
		return nil
	}
	_ = syscall.Kill(v.qemu.Process.Pid, syscall.SIGKILL)
	select {
	case <-v.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("QEMU of %s did not exit", id)
	}
	return nil
}

// Freeze stops a running system's VM (SIGSTOP) without powering it off: the guest and everything in it
// stop answering, as a hung host does, until the BMC powers it off or cycles it (PowerOff kills a stopped
// VM as it kills a running one).
func (d *QEMUDriver) Freeze(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.running[id]
	if !ok {
		return fmt.Errorf("the VM of %s does not run", id)
	}
	select {
	case <-v.done:
		return fmt.Errorf("the VM of %s does not run", id)
	default:
	}
	if err := syscall.Kill(v.qemu.Process.Pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("failed to freeze the VM of %s: %w", id, err)
	}
	return nil
}

// Close powers every VM off.
func (d *QEMUDriver) Close() {
	d.mu.Lock()
	ids := make([]string, 0, len(d.running))
	for id := range d.running {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	for _, id := range ids {
		_ = d.PowerOff(context.Background(), id)
	}
}
