package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/kernel"
	"github.com/yonder-dev/yonder/network/internal/dataplane/keys"
	"github.com/yonder-dev/yonder/network/internal/dataplane/wgdev"
)

// Key rotation, make-before-break. A node has two WireGuard slots, each with its own device, key, listen
// port and address inside WireGuard (desired.SlotAddr), so a peer can hold the old and the new key at the same
// time without the two needing the same allowed IP:
//
//  1. Rotate: the other slot gets a new key and its device comes up with the same peers; the node publishes
//     nextPublicKey. Traffic still flows through the current slot.
//  2. Peers add the next key (allowed IP: this node's address of the next slot) and handshake with it.
//  3. Once every WireGuard peer has handshaken with the next slot (or RotationTimeout passed), the node
//     switches: its routes to the peers move to the next device with that slot's source address (one route
//     replace each), the slot file records the switch, and it publishes the new key as publicKey. Peers were
//     already accepting the new key, so nothing sent after the switch is dropped.
//  4. Peers then send to the new slot; the old device stays up (draining) until nothing has arrived on it
//     for DrainQuiet, so packets peers send before they learn of the switch still arrive, then it is removed.
const (
	// RotationTimeout bounds step 3's wait: a peer that never handshakes (down, or not reading the API)
	// must not block the rotation forever; it loses traffic until it catches up.
	RotationTimeout = 2 * time.Minute
	// DrainQuiet is how long the previous slot must receive nothing before it is removed.
	DrainQuiet = 5 * time.Second
	// drainShortest and drainLongest bound the drain.
	drainShortest = 10 * time.Second
	drainLongest  = 5 * time.Minute
)

type rotation struct {
	start time.Time
	// after the switch
	drain      *wgdev.Device
	drainSlot  int
	drainStart time.Time
	drainQuiet time.Time
	drainRx    int64
	// closing: the drained device is being removed; it stays in drain (so no new rotation reuses its port)
	// but the Applier no longer sees it.
	closing bool
}

// SlotDevice is the name of a slot's WireGuard device: the configured name for slot 0, the name with "1"
// appended (within the 15-byte limit) for slot 1.
func SlotDevice(name string, slot int) string {
	if slot == 0 {
		return name
	}
	if len(name) > 14 {
		name = name[:14]
	}
	return name + "1"
}

// openSlots loads the slot state and keys and opens the devices of the current slot and, when a rotation was
// in progress at the last exit, of the next one. A kernel device of an unused slot is removed.
func (d *Daemon) openSlots() error {
	s, err := keys.LoadSlots(d.opt.StateDir)
	if err != nil {
		return err
	}
	d.slots = s
	for _, slot := range []int{s.Current, s.Next} {
		if slot < 0 {
			continue
		}
		k, err := keys.LoadOrCreate(keys.SlotKeyPath(d.opt.StateDir, slot))
		if err != nil {
			return err
		}
		if d.wgs[slot], err = d.openSlot(slot, k); err != nil {
			return err
		}
		d.keys[slot] = k
	}
	if s.Rotating() {
		d.rot.start = time.Now()
	} else if l, err := netlink.LinkByName(SlotDevice(d.opt.Devices.WireGuard, 1-s.Current)); err == nil {
		_ = netlink.LinkDel(l) // a drained slot left by a restart (kernel devices outlive the process)
	}
	return nil
}

func (d *Daemon) openSlot(slot int, k wgtypes.Key) (*wgdev.Device, error) {
	w, err := wgdev.Open(SlotDevice(d.opt.Devices.WireGuard, slot), d.mtu, d.opt.Kernel, d.opt.Log)
	if err != nil {
		return nil, err
	}
	if _, err := w.SetIdentity(k, desired.SlotPort(d.opt.WGPort, slot)); err != nil {
		_ = w.Close(true)
		return nil, err
	}
	return w, nil
}

// ownWireGuard is the Applier's view of the slots. d.mu must be held.
func (d *Daemon) ownWireGuard() kernel.OwnWireGuard {
	own := kernel.OwnWireGuard{Send: d.wgs[d.slots.Current], SendSlot: d.slots.Current}
	switch {
	case d.slots.Rotating():
		own.Other, own.OtherSlot = d.wgs[d.slots.Next], d.slots.Next
	case d.rot.drain != nil && !d.rot.closing:
		own.Other, own.OtherSlot = d.rot.drain, d.rot.drainSlot
	}
	return own
}

// rotationPhase names the rotation's step for the debug dump. d.mu must be held.
func (d *Daemon) rotationPhase() string {
	switch {
	case d.slots.Rotating():
		return "handshaking"
	case d.rot.drain != nil:
		return "draining"
	}
	return ""
}

// ErrRotating is returned by Rotate while a rotation is in progress.
var ErrRotating = errors.New("a key rotation is in progress")

// Rotate starts a make-before-break key rotation (see the package comment of rotate.go's steps).
func (d *Daemon) Rotate() error {
	d.mu.Lock()
	if d.slots.Rotating() || d.rot.drain != nil {
		d.mu.Unlock()
		return fmt.Errorf("failed to start a key rotation: %w", ErrRotating)
	}
	next := 1 - d.slots.Current
	if err := d.slotAddressable(next); err != nil {
		d.mu.Unlock()
		return fmt.Errorf("failed to start a key rotation: %w", err)
	}
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		d.mu.Unlock()
		return fmt.Errorf("failed to generate the next key: %w", err)
	}
	// The key is on disk before the state says "rotating", so a restart finds it.
	if err := keys.Store(keys.SlotKeyPath(d.opt.StateDir, next), k); err != nil {
		d.mu.Unlock()
		return err
	}
	w, err := d.openSlot(next, k)
	if err != nil {
		d.mu.Unlock()
		return err
	}
	s := keys.Slots{Current: d.slots.Current, Next: next}
	if err := keys.StoreSlots(d.opt.StateDir, s); err != nil {
		d.mu.Unlock()
		_ = w.Close(true)
		return err
	}
	d.slots, d.keys[next], d.wgs[next], d.rot.start = s, k, w, time.Now()
	d.mu.Unlock()
	d.opt.Log.Info("Rotating WireGuard key", "slot", next, "device", w.Name, "nextPublicKey", k.PublicKey().String())
	d.kickNow()
	return d.publish()
}

// slotAddressable checks that the node's pod CIDR has an address for slot (desired.SlotAddr): a rotation
// into a slot without one is refused before peers learn of a key whose address the node cannot hold. Before
// the first input the pod CIDR is unknown and the check passes (Apply then reports it). d.mu must be held.
func (d *Daemon) slotAddressable(slot int) error {
	if d.input == nil {
		return nil
	}
	t, ok := desired.TunnelPrefix(d.input.PodCIDRs)
	if !ok {
		return nil // Compute reports the missing IPv4 pod CIDR
	}
	_, err := desired.SlotAddr(t, slot)
	return err
}

func (d *Daemon) kickNow() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// rotationStep advances a rotation: switch once every WireGuard peer has handshaken with the next slot, and
// remove the previous slot once it has drained.
func (d *Daemon) rotationStep() {
	d.mu.Lock()
	var switched, closed bool
	var drained *wgdev.Device
	now := time.Now()
	switch {
	case d.slots.Rotating() && d.applied > 0:
		missing := d.missingHandshakes()
		if missing > 0 && now.Sub(d.rot.start) < RotationTimeout {
			break
		}
		if missing > 0 {
			d.opt.Log.Info("Switching WireGuard key without every peer's handshake", "missing", missing, "timeout", RotationTimeout)
		}
		old := d.slots.Current
		s := keys.Slots{Current: d.slots.Next, Next: -1}
		if err := keys.StoreSlots(d.opt.StateDir, s); err != nil {
			d.opt.Log.Error("Switching WireGuard key", "err", err)
			break
		}
		d.slots = s
		d.rot.drain, d.rot.drainSlot, d.rot.drainStart, d.rot.drainQuiet = d.wgs[old], old, now, now
		d.rot.drainRx = rxTotal(d.rot.drain)
		d.wgs[old] = nil
		switched = true
		d.opt.Log.Info("Switched WireGuard key", "slot", s.Current, "publicKey", d.keys[s.Current].PublicKey().String())
	case d.rot.drain != nil && !d.rot.closing:
		if rx := rxTotal(d.rot.drain); rx != d.rot.drainRx {
			d.rot.drainRx, d.rot.drainQuiet = rx, now
		}
		if (now.Sub(d.rot.drainQuiet) >= DrainQuiet && now.Sub(d.rot.drainStart) >= drainShortest) || now.Sub(d.rot.drainStart) >= drainLongest {
			drained, d.rot.closing = d.rot.drain, true
			closed = true
		}
	}
	d.mu.Unlock()
	if switched {
		// Routes move to the new slot before peers learn of the switch (a failure is retried by the loop).
		if d.reconcile() != nil {
			d.dirty = true
		}
		if err := d.publish(); err != nil {
			d.opt.Log.Error("Publishing switched key", "err", err)
		}
	}
	if closed {
		// The Applier no longer sees it; the device goes with its address and peers.
		if d.reconcile() != nil {
			d.dirty = true
		}
		if err := drained.Close(true); err != nil {
			d.opt.Log.Error("Removing drained WireGuard slot", "device", drained.Name, "err", err)
		}
		// Only now may a new rotation open this slot (its port is free).
		d.mu.Lock()
		d.rot.drain, d.rot.closing = nil, false
		d.mu.Unlock()
		d.opt.Log.Info("Removed drained WireGuard slot", "device", drained.Name)
		// The rotation is over: L3 links may send L3 again (desired.Features.Rotating).
		d.kickNow()
	}
}

// missingHandshakes counts WireGuard peers of the applied plan that have not handshaken with the next slot
// since the rotation started. d.mu must be held.
func (d *Daemon) missingHandshakes() int {
	dev, err := d.wgs[d.slots.Next].State()
	if err != nil {
		return 1 << 30
	}
	seen := map[string]bool{}
	for _, p := range dev.Peers {
		if p.LastHandshakeTime.After(d.rot.start) {
			seen[p.PublicKey.String()] = true
		}
	}
	missing := 0
	for _, h := range d.desired.Hops {
		if h.Via == desired.ViaWireGuard && !seen[h.PublicKey] && (h.NextPublicKey == "" || !seen[h.NextPublicKey]) {
			missing++
		}
	}
	return missing
}

func rxTotal(w *wgdev.Device) int64 {
	dev, err := w.State()
	if err != nil {
		return -1
	}
	var n int64
	for _, p := range dev.Peers {
		n += p.ReceiveBytes
	}
	return n
}
