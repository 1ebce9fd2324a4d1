// Package labnet gives each test (or the local lab) its own small L2 network on this machine: a Linux
// bridge in the root network namespace with a /24 of its own, to which hosts (network namespaces) attach
// with veth pairs. The kube-apiserver of a workload cluster binds to the bridge address, so hosts reach
// it exactly as a remote node reaches a real control plane.
//
// Test packages run as concurrent processes, so every network takes a numbered slot guarded by an flock:
// the kernel drops the lock when the holder dies, and the next holder of a slot first removes whatever a
// crashed predecessor left behind (bridge, namespaces, processes), because all names derive from the slot.
package labnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/yonder-dev/yonder/test/internal/proc"
)

const (
	// lockDir holds one lock file per slot.
	lockDir = "/run/yonder-test/labnet"
	// MaxSlot is the highest slot number; slots map to 10.250.<slot>.0/24.
	MaxSlot = 250
	// netnsDir is where `ip netns` keeps its named namespaces.
	netnsDir = "/run/netns"
)

// Network is one lab network. It is safe for concurrent use.
type Network struct {
	// Slot is this network's number; every name and address below derives from it.
	Slot int
	// Bridge is the name of the bridge device in the root namespace.
	Bridge string
	// Prefix is the network's subnet.
	Prefix netip.Prefix
	// Gateway is the bridge's own address: services on this machine that hosts must reach bind to it.
	Gateway netip.Addr

	lock     *os.File
	mu       sync.Mutex
	nextHost int
	closers  []func() error
}

// RequireRoot returns a clear error when the process cannot create namespaces and links.
func RequireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("lab networks need root (network namespaces, bridges, veth): run the tests as root, e.g. `sudo make test`")
	}
	for _, tool := range []string{"ip", "nsenter", "unshare"} {
		if _, err := proc.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing: run `hack/test-bins.sh --packages` (installs iproute2, util-linux): %w", tool, err)
		}
	}
	return nil
}

// New takes a free slot, removes leftovers of a crashed holder of that slot, and creates the bridge.
func New(ctx context.Context) (*Network, error) {
	if err := RequireRoot(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(lockDir, 0o750); err != nil {
		return nil, fmt.Errorf("failed to create %s: %w", lockDir, err)
	}
	first := 1
	if s := os.Getenv("YONDER_LABNET_FIRST_SLOT"); s != "" {
		if v, err := strconv.Atoi(s); err == nil {
			first = v
		}
	}
	for slot := first; slot <= MaxSlot; slot++ {
		n, err := takeSlot(ctx, slot)
		if err != nil {
			return nil, err
		}
		if n != nil {
			return n, nil
		}
	}
	return nil, fmt.Errorf("all %d lab network slots are in use (see %s): stop other test runs or labs", MaxSlot, lockDir)
}

// takeSlot returns nil, nil when another process holds the slot.
func takeSlot(ctx context.Context, slot int) (*Network, error) {
	f, err := os.OpenFile(filepath.Join(lockDir, strconv.Itoa(slot)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("failed to open slot lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, nil
	}
	n := newNetwork(slot, f)
	if err := n.removeLeftovers(ctx); err != nil {
		_ = n.release()
		return nil, err
	}
	if err := n.createBridge(ctx); err != nil {
		_ = n.Close()
		return nil, err
	}
	if err := n.checkRouting(ctx); err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

func newNetwork(slot int, lock *os.File) *Network {
	prefix := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 250, octet(slot), 0}), 24)
	return &Network{
		Slot:    slot,
		Bridge:  fmt.Sprintf("ylab%d", slot),
		Prefix:  prefix,
		Gateway: netip.AddrFrom4([4]byte{10, 250, octet(slot), 1}),
		lock:    lock,
	}
}

// NamePrefix is the prefix of every network namespace this network creates.
func (n *Network) NamePrefix() string { return fmt.Sprintf("yh%d-", n.Slot) }

func (n *Network) createBridge(ctx context.Context) error {
	steps := [][]string{
		{"link", "add", n.Bridge, "type", "bridge"},
		{"addr", "add", netip.PrefixFrom(n.Gateway, n.Prefix.Bits()).String(), "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	}
	for _, s := range steps {
		if _, err := proc.Run(ctx, "ip", s...); err != nil {
			return fmt.Errorf("failed to create lab bridge %s: %w", n.Bridge, err)
		}
	}
	return nil
}

// removeLeftovers deletes the bridge and namespaces (and the processes inside them) that a crashed
// previous holder of this slot left behind.
func (n *Network) removeLeftovers(ctx context.Context) error {
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), n.NamePrefix()) {
			if err := DeleteNamespace(ctx, e.Name()); err != nil {
				return err
			}
		}
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		name := l.Name()
		if name == n.Bridge || strings.HasPrefix(name, fmt.Sprintf("yv%dh", n.Slot)) || strings.HasPrefix(name, fmt.Sprintf("yp%dh", n.Slot)) {
			if _, err := proc.Run(ctx, "ip", "link", "del", name); err != nil && LinkExists(name) {
				return fmt.Errorf("failed to remove leftover link %s: %w", name, err)
			}
		}
	}
	// With the bridge gone, any route left in the root namespace for (part of) this prefix is stale: the
	// lab routes a remote site's prefix via that site's gateway on another bridge, and a holder killed
	// before it removed that route leaves it behind. It would capture the next holder's traffic; the
	// kernel would not even install the new bridge's own prefix route beside it.
	if _, err := proc.Run(ctx, "ip", "-4", "route", "flush", "root", n.Prefix.String()); err != nil {
		return fmt.Errorf("failed to remove stale routes to %s: %w", n.Prefix, err)
	}
	return nil
}

// checkRouting makes sure this machine reaches the network's hosts through its bridge: a route or an
// address that something other than the lab put on this prefix would otherwise surface much later as
// hosts that time out.
func (n *Network) checkRouting(ctx context.Context) error {
	host := netip.AddrFrom4([4]byte{10, 250, octet(n.Slot), 10})
	out, err := proc.Run(ctx, "ip", "-4", "-o", "route", "get", host.String())
	if err != nil {
		return fmt.Errorf("failed to look up the route to %s: %w", host, err)
	}
	if !strings.Contains(" "+out+" ", " dev "+n.Bridge+" ") {
		return fmt.Errorf("this machine routes %s (lab network %s) elsewhere: %q; remove that route or address (ip -4 route show root %s; ip -4 addr show to %s)",
			host, n.Prefix, strings.Join(strings.Fields(strings.ReplaceAll(out, "\\", " ")), " "), n.Prefix, n.Prefix)
	}
	return nil
}

// Attachment is one namespace attached to the bridge.
type Attachment struct {
	// Namespace is the `ip netns` name; NamespacePath the file to pass to nsenter --net.
	Namespace     string
	NamespacePath string
	// Address is the namespace's address on the lab network.
	Address netip.Addr
	// Interface is the device name inside the namespace.
	Interface string
}

// Attach creates a network namespace named <prefix><suffix>, links it to the bridge with a veth pair and
// gives it the next free address. The namespace's default route points at the bridge address.
func (n *Network) Attach(ctx context.Context, suffix string) (*Attachment, error) {
	n.mu.Lock()
	n.nextHost++
	idx := n.nextHost
	n.mu.Unlock()
	if idx+9 > 254 {
		return nil, fmt.Errorf("lab network %s is full", n.Prefix)
	}
	addr := netip.AddrFrom4([4]byte{10, 250, octet(n.Slot), octet(idx + 9)})
	ns := n.NamePrefix() + suffix
	rootSide := fmt.Sprintf("yv%dh%d", n.Slot, idx)
	tmpPeer := fmt.Sprintf("yp%dh%d", n.Slot, idx)
	a := &Attachment{Namespace: ns, NamespacePath: filepath.Join(netnsDir, ns), Address: addr, Interface: "eth0"}
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", rootSide, "type", "veth", "peer", "name", tmpPeer},
		{"link", "set", rootSide, "master", n.Bridge},
		{"link", "set", rootSide, "up"},
		{"link", "set", tmpPeer, "netns", ns},
		{"-n", ns, "link", "set", tmpPeer, "name", a.Interface},
		{"-n", ns, "addr", "add", netip.PrefixFrom(addr, n.Prefix.Bits()).String(), "dev", a.Interface},
		{"-n", ns, "link", "set", a.Interface, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "route", "add", "default", "via", n.Gateway.String()},
	}
	for _, s := range steps {
		if _, err := proc.Run(ctx, "ip", s...); err != nil {
			_ = DeleteNamespace(ctx, ns)
			_, _ = proc.Run(ctx, "ip", "link", "del", rootSide)
			return nil, fmt.Errorf("failed to attach namespace %s to %s: %w", ns, n.Bridge, err)
		}
	}
	n.OnClose(func() error {
		// Deleting the root side removes the pair at once; a namespace's own devices are torn down
		// asynchronously after `ip netns del`, which would race with the next holder of this slot.
		_, _ = proc.Run(context.Background(), "ip", "link", "del", rootSide)
		return DeleteNamespace(context.Background(), ns)
	})
	return a, nil
}

// OnClose registers cleanup that runs, in reverse order, before the bridge is removed.
func (n *Network) OnClose(f func() error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closers = append(n.closers, f)
}

// Close runs the registered cleanups, removes the bridge and frees the slot.
func (n *Network) Close() error {
	n.mu.Lock()
	closers := n.closers
	n.closers = nil
	n.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.removeLeftovers(context.Background()); err != nil {
		errs = append(errs, err)
	}
	if err := n.release(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (n *Network) release() error {
	if n.lock == nil {
		return nil
	}
	err := n.lock.Close() // closing the descriptor drops the flock
	n.lock = nil
	return err
}

// DeleteNamespace kills every process inside the named network namespace, then deletes it. A namespace
// whose processes survive would keep the veth (and its address) alive after `ip netns del`.
func DeleteNamespace(ctx context.Context, ns string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, ns)); err != nil {
		return nil
	}
	// Kill until none is left: a process may fork while we kill its parent.
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _ := proc.Run(ctx, "ip", "netns", "pids", ns)
		pids := strings.Fields(out)
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return len(pids) == 0, nil
	})
	if _, err := proc.Run(ctx, "ip", "netns", "del", ns); err != nil {
		return fmt.Errorf("failed to delete network namespace %s: %w", ns, err)
	}
	return nil
}

// octet converts a number already bounds-checked by the caller (slots ≤ MaxSlot, hosts ≤ 254) to an
// address byte.
func octet(i int) byte {
	if i < 0 || i > 255 {
		panic(fmt.Sprintf("labnet: %d is not an address octet", i))
	}
	return byte(i)
}
