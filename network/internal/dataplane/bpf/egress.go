package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// MaxBackends is how many healthy members one group can spread flows over (the C side's MAX_BACKENDS).
const MaxBackends = 8

// Backend is one member of a group: a tunnel device and the next hop's tunnel MAC on it.
type Backend struct {
	// ID is the member's stable identity (hash of its node name): the rendezvous input, so every node
	// picks the same member for a flow and removing a member moves only its flows.
	ID      uint32
	Ifindex int
	// MTU is the path's inner MTU; larger packets are left to the kernel path (which answers with ICMP).
	MTU    int
	DstMAC net.HardwareAddr
	SrcMAC net.HardwareAddr
	// L3 marks a device without an L2 header (redirected without rewriting the frame).
	L3 bool
}

// Desired is the complete content the maps should have.
type Desired struct {
	Prefixes map[netip.Prefix]uint32
	Groups   map[uint32][]Backend
}

// Stats is what a Sync wrote.
type Stats struct{ Updated, Deleted int }

// Attachment says how the program is attached.
type Attachment string

const (
	// AttachTCX is the tcx hook (kernel ≥ 6.6): links owned by this process.
	AttachTCX Attachment = "tcx"
	// AttachClsact is the classic clsact qdisc with a direct-action filter.
	AttachClsact Attachment = "clsact"
)

// Datapath is the loaded program and its maps.
type Datapath struct {
	objs egressObjects
	cur  Desired
	// attachments
	links   []tcxLink
	filters []*netlink.BpfFilter
}

// tcxLink is a tcx attachment and the device it is on (Detach finds it by the device).
type tcxLink struct {
	ifindex int
	link.Link
}

// Load loads the program and creates its maps.
func Load() (*Datapath, error) {
	d := &Datapath{cur: Desired{Prefixes: map[netip.Prefix]uint32{}, Groups: map[uint32][]Backend{}}}
	if err := loadEgressObjects(&d.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("failed to load egress program: %+v", ve)
		}
		return nil, fmt.Errorf("failed to load egress program: %w", err)
	}
	return d, nil
}

// Program returns the program (for Program.Run tests).
func (d *Datapath) Program() *ebpf.Program { return d.objs.PodEgress }

// Attach attaches the program to the ingress hook of ifindex (where pod traffic enters the host): tcx when the
// kernel has it, else clsact. force selects one method ("" = detect).
func (d *Datapath) Attach(ifindex int, force Attachment) (Attachment, error) {
	if force != AttachClsact {
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: d.objs.PodEgress, Attach: ebpf.AttachTCXIngress})
		if err == nil {
			d.links = append(d.links, tcxLink{ifindex, l})
			return AttachTCX, nil
		}
		if force == AttachTCX {
			return "", fmt.Errorf("failed to attach tcx program to ifindex %d: %w", ifindex, err)
		}
	}
	lk, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return "", fmt.Errorf("failed to find link %d: %w", ifindex, err)
	}
	q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
	if err := netlink.QdiscReplace(q); err != nil {
		return "", fmt.Errorf("failed to add clsact qdisc to %s: %w", lk.Attrs().Name, err)
	}
	f := &netlink.BpfFilter{
		FilterAttrs:  netlink.FilterAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_MIN_INGRESS, Handle: 1, Protocol: unix.ETH_P_ALL, Priority: 1},
		Fd:           d.objs.PodEgress.FD(),
		Name:         "yonder-pod-egress",
		DirectAction: true,
	}
	if err := netlink.FilterReplace(f); err != nil {
		return "", fmt.Errorf("failed to add bpf filter to %s: %w", lk.Attrs().Name, err)
	}
	d.filters = append(d.filters, f)
	return AttachClsact, nil
}

// Sync makes the maps equal to want, writing only entries that differ (groups first, so a prefix never points
// at a missing group; stale prefixes are removed before their groups).
func (d *Datapath) Sync(want Desired) (Stats, error) {
	var st Stats
	for id, bs := range want.Groups {
		if old, ok := d.cur.Groups[id]; ok && sameBackends(old, bs) {
			continue
		}
		v, err := groupValue(bs)
		if err != nil {
			return st, err
		}
		if err := d.objs.Groups.Put(id, v); err != nil {
			return st, fmt.Errorf("failed to write group %d: %w", id, err)
		}
		d.cur.Groups[id] = append([]Backend(nil), bs...)
		st.Updated++
	}
	for p, gid := range want.Prefixes {
		if old, ok := d.cur.Prefixes[p]; ok && old == gid {
			continue
		}
		k, err := prefixKey(p)
		if err != nil {
			return st, err
		}
		if err := d.objs.Prefixes.Put(k, gid); err != nil {
			return st, fmt.Errorf("failed to write prefix %s: %w", p, err)
		}
		d.cur.Prefixes[p] = gid
		st.Updated++
	}
	for p := range maps.Clone(d.cur.Prefixes) {
		if _, ok := want.Prefixes[p]; ok {
			continue
		}
		k, _ := prefixKey(p)
		if err := d.objs.Prefixes.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return st, fmt.Errorf("failed to delete prefix %s: %w", p, err)
		}
		delete(d.cur.Prefixes, p)
		st.Deleted++
	}
	for id := range maps.Clone(d.cur.Groups) {
		if _, ok := want.Groups[id]; ok {
			continue
		}
		if err := d.objs.Groups.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return st, fmt.Errorf("failed to delete group %d: %w", id, err)
		}
		delete(d.cur.Groups, id)
		st.Deleted++
	}
	return st, nil
}

// Counters returns the program's counters summed over CPUs: redirected, miss, no healthy member, oversize,
// TCP SYN left to the kernel, ICMP left to the kernel.
func (d *Datapath) Counters() ([6]uint64, error) {
	var out [6]uint64
	for i := range uint32(len(out)) {
		var per []uint64
		if err := d.objs.Stats.Lookup(i, &per); err != nil {
			return out, fmt.Errorf("failed to read counter %d: %w", i, err)
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return out, nil
}

// Sizes returns the number of prefixes and groups in the maps.
func (d *Datapath) Sizes() (prefixes, groups int) { return len(d.cur.Prefixes), len(d.cur.Groups) }

// Detach releases the attachments to ifindex: a device that is gone (the kernel already detached the program)
// or is about to go. Without it every removed device would keep its link's file descriptor until Close.
func (d *Datapath) Detach(ifindex int) error {
	var errs []error
	links := d.links[:0]
	for _, l := range d.links {
		if l.ifindex != ifindex {
			links = append(links, l)
			continue
		}
		errs = append(errs, l.Close())
	}
	d.links = links
	filters := d.filters[:0]
	for _, f := range d.filters {
		if f.LinkIndex != ifindex {
			filters = append(filters, f)
			continue
		}
		if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("failed to remove bpf filter from ifindex %d: %w", ifindex, err))
		}
	}
	d.filters = filters
	return errors.Join(errs...)
}

// Close detaches and unloads everything.
func (d *Datapath) Close() error {
	var errs []error
	for _, l := range d.links {
		errs = append(errs, l.Close())
	}
	for _, f := range d.filters {
		if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, d.objs.Close())
	return errors.Join(errs...)
}

func prefixKey(p netip.Prefix) (egressPrefixKey, error) {
	if !p.Addr().Is4() {
		return egressPrefixKey{}, fmt.Errorf("failed to encode prefix %s: only IPv4 prefixes are handled by the eBPF path", p)
	}
	a := p.Masked().Addr().As4()
	return egressPrefixKey{Prefixlen: uint32(p.Bits()), Addr: binary.NativeEndian.Uint32(a[:])}, nil //nolint:gosec // 0..32
}

func groupValue(bs []Backend) (egressGroup, error) {
	var g egressGroup
	if len(bs) > MaxBackends {
		return g, fmt.Errorf("failed to encode group: %d members, at most %d", len(bs), MaxBackends)
	}
	g.Count = uint32(len(bs)) //nolint:gosec // at most MaxBackends
	for i, b := range bs {
		e := &g.B[i]
		e.Id, e.Ifindex, e.Mtu = b.ID, uint32(b.Ifindex), uint32(b.MTU) //nolint:gosec // kernel ifindex and MTU are non-negative 32-bit values
		copy(e.Dmac[:], b.DstMAC)
		copy(e.Smac[:], b.SrcMAC)
		if b.L3 {
			e.Flags = 1
		}
	}
	return g, nil
}

func sameBackends(a, b []Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.ID != y.ID || x.Ifindex != y.Ifindex || x.MTU != y.MTU || x.L3 != y.L3 ||
			x.DstMAC.String() != y.DstMAC.String() || x.SrcMAC.String() != y.SrcMAC.String() {
			return false
		}
	}
	return true
}
