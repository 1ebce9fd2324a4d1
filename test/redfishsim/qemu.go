package redfishsim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// QEMUSystem is one emulated server behind the QEMU driver.
type QEMUSystem struct {
	// Tap is an existing tap device (on the boot network's bridge) the VM's NIC uses; MAC its address.
	Tap, MAC string
	// MemoryMiB of the VM (default 512: the agent's initramfs runs in RAM).
	MemoryMiB int
}

// QEMUDriver is a PowerDriver whose systems are QEMU VMs (software emulation): power on starts the VM —
// network boot (SeaBIOS + iPXE option ROM) when the one-time PXE override asked for it, else the normal
// boot order (no disk: it halts in the firmware) — with a software TPM (swtpm, `-tpmdev emulator`) whose
// state outlives power cycles, as a soldered TPM does; power off kills the VM.
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

// Add registers a system and manufactures its TPM (swtpm_setup, EK with certificate).
func (d *QEMUDriver) Add(ctx context.Context, id string, s QEMUSystem) error {
	state := filepath.Join(d.Dir, id, "tpm")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return fmt.Errorf("failed to create TPM state of %s: %w", id, err)
	}
	out, err := exec.CommandContext(ctx, "swtpm_setup", "--tpm2", "--create-ek-cert", "--tpmstate", state, "--overwrite",
		"--pcr-banks", "sha256", "--logfile", filepath.Join(d.Dir, id, "swtpm-setup.log")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("failed to manufacture the TPM of %s: %w: %s", id, err, out)
	}
	if s.MemoryMiB == 0 {
		s.MemoryMiB = 512
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.systems[id] = s
	return nil
}

// ConsoleLog is the path of a system's serial console log.
func (d *QEMUDriver) ConsoleLog(id string) string { return filepath.Join(d.Dir, id, "console.log") }

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
	ctrl := filepath.Join(dir, "swtpm-ctrl.sock")
	_ = os.Remove(ctrl)
	sw := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+filepath.Join(dir, "tpm"),
		"--ctrl", "type=unixio,path="+ctrl, "--terminate", "--log", "file="+filepath.Join(dir, "swtpm.log")+",level=1")
	sw.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := sw.Start(); err != nil {
		return fmt.Errorf("failed to start swtpm for %s: %w", id, err)
	}
	// QEMU's -tpmdev needs swtpm's control socket; give swtpm up to 2 s to create it (QEMU reports a
	// missing socket itself, so the wait's own timeout is not an error here).
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(ctrl)
		return err == nil, nil
	})
	boot := "c"
	if target == "Pxe" {
		boot = "n"
	}
	args := []string{"-machine", "pc,accel=tcg", "-m", fmt.Sprint(s.MemoryMiB), "-smp", "1",
		"-display", "none", "-nodefaults", "-no-reboot", "-boot", boot,
		"-netdev", "tap,id=n0,ifname=" + s.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,disable-legacy=on,netdev=n0,mac=" + s.MAC + ",romfile=" + d.IPXEROM,
		"-chardev", "socket,id=chrtpm,path=" + ctrl, "-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-tis,tpmdev=tpm0",
		"-serial", "file:" + d.ConsoleLog(id),
		"-debugcon", "file:" + d.FirmwareLog(id), "-global", "isa-debugcon.iobase=0x402"}
	q := exec.Command("qemu-system-x86_64", args...)
	log, err := os.Create(filepath.Join(dir, "qemu.log")) //nolint:gosec // the driver's own directory
	if err != nil {
		_ = sw.Process.Kill()
		return fmt.Errorf("failed to create QEMU log for %s: %w", id, err)
	}
	q.Stdout, q.Stderr = log, log
	q.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := q.Start(); err != nil {
		_ = log.Close()
		_ = sw.Process.Kill()
		return fmt.Errorf("failed to start QEMU for %s: %w", id, err)
	}
	v := &vm{qemu: q, swtpm: sw, done: make(chan struct{})}
	go func() {
		_ = q.Wait()
		_ = log.Close()
		// --terminate ends swtpm when QEMU closes the control channel; make sure of it.
		_ = syscall.Kill(sw.Process.Pid, syscall.SIGTERM)
		_ = sw.Wait()
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
