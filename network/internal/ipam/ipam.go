// Package ipam carves per-node pod CIDR blocks out of a Site's pools. It keeps no state of its own: the
// allocations are the Nodes' spec.podCIDRs (durable in the apiserver), so a restarted controller rebuilds
// exactly the same view and never hands out a block twice.
package ipam

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Default block sizes per family: a /24 holds 254 pods (kubelet's default max is 110); a /64 is the
// smallest IPv6 block SLAAC-style tooling expects.
const (
	DefaultBlockSizeIPv4 = 24
	DefaultBlockSizeIPv6 = 64
)

// Longest block per family. A node's IPv4 block holds its tunnel address (the first), the pod bridge's
// gateway (the second), the address its WireGuard device takes during a key rotation (the last but one)
// and the broadcast address (the last), so a /30 leaves no address for a pod and a /31 or /32 not even
// those; /29 leaves 4 pods. An IPv6 block holds the tunnel address and the gateway; /125 leaves 6 pods.
const (
	MaxBlockSizeIPv4 = 29
	MaxBlockSizeIPv6 = 125
)

// ErrExhausted is returned when a pool of a family has no free block.
var ErrExhausted = errors.New("pod CIDR pool exhausted")

// Pool is one parsed pool.
type Pool struct {
	// Prefix is the pool (masked).
	Prefix netip.Prefix
	// BlockBits is the prefix length of each block.
	BlockBits int
	used      map[uint64]struct{}
	size      uint64
	next      uint64
}

// ParsePool parses and checks one pool; the webhook uses the same function so both agree.
func ParsePool(p netv1.PodCIDRPool) (Pool, error) {
	pfx, err := netip.ParsePrefix(p.CIDR)
	if err != nil {
		return Pool{}, fmt.Errorf("failed to parse pod CIDR pool %q: %w", p.CIDR, err)
	}
	if pfx.Masked() != pfx {
		return Pool{}, fmt.Errorf("pod CIDR pool %q has host bits set (use %s)", p.CIDR, pfx.Masked())
	}
	bits := int(p.BlockSize)
	if bits == 0 {
		bits = DefaultBlockSizeIPv4
		if pfx.Addr().Is6() {
			bits = DefaultBlockSizeIPv6
		}
	}
	if bits < pfx.Bits() || bits > pfx.Addr().BitLen() {
		return Pool{}, fmt.Errorf("block size /%d does not fit pool %s (must be between /%d and /%d)", bits, pfx, pfx.Bits(), pfx.Addr().BitLen())
	}
	if longest := maxBlockSize(pfx); bits > longest {
		return Pool{}, fmt.Errorf("block size /%d of pool %s leaves no room for pods: a node's block also holds its tunnel address, the pod gateway and (IPv4) the WireGuard rotation and broadcast addresses; use /%d or shorter", bits, pfx, longest)
	}
	// Cap the index space at 2^62 blocks: nobody allocates more, and it keeps the arithmetic in uint64.
	shift := min(bits-pfx.Bits(), 62)
	return Pool{Prefix: pfx, BlockBits: bits, used: map[uint64]struct{}{}, size: uint64(1) << shift}, nil
}

// Capacity is the number of blocks in the pool.
func (p *Pool) Capacity() uint64 { return p.size }

// block returns the index of cidr in the pool, or false when cidr is not one of its blocks.
func (p *Pool) index(cidr netip.Prefix) (uint64, bool) {
	if cidr.Bits() != p.BlockBits || !p.Prefix.Contains(cidr.Addr()) || cidr.Addr().Is4() != p.Prefix.Addr().Is4() {
		return 0, false
	}
	off := new(big.Int).Sub(addrInt(cidr.Addr()), addrInt(p.Prefix.Addr()))
	off.Rsh(off, uint(p.Prefix.Addr().BitLen()-p.BlockBits))
	if !off.IsUint64() || off.Uint64() >= p.size {
		return 0, false
	}
	return off.Uint64(), true
}

func (p *Pool) block(i uint64) netip.Prefix {
	n := new(big.Int).SetUint64(i)
	n.Lsh(n, uint(p.Prefix.Addr().BitLen()-p.BlockBits))
	n.Add(n, addrInt(p.Prefix.Addr()))
	return netip.PrefixFrom(intAddr(n, p.Prefix.Addr().Is4()), p.BlockBits)
}

func addrInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

func intAddr(n *big.Int, v4 bool) netip.Addr {
	size := 16
	if v4 {
		size = 4
	}
	b := n.FillBytes(make([]byte, size))
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Allocator hands out blocks of one Site's pools.
type Allocator struct {
	pools []*Pool
}

// New parses a Site's pools. Invalid pools (the webhook rejects them) are an error.
func New(pools []netv1.PodCIDRPool) (*Allocator, error) {
	a := &Allocator{}
	for _, p := range pools {
		pp, err := ParsePool(p)
		if err != nil {
			return nil, err
		}
		a.pools = append(a.pools, &pp)
	}
	return a, nil
}

// Empty reports whether the Site has no pools (then the cluster allocates pod CIDRs).
func (a *Allocator) Empty() bool { return len(a.pools) == 0 }

// MarkUsed records an existing allocation; CIDRs outside the pools are ignored. It reports whether the
// CIDR belongs to a pool.
func (a *Allocator) MarkUsed(cidr string) bool {
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	for _, p := range a.pools {
		if i, ok := p.index(pfx.Masked()); ok {
			p.used[i] = struct{}{}
			return true
		}
	}
	return false
}

// Contains reports whether cidr lies inside one of the pools (whether or not it is a whole block).
func (a *Allocator) Contains(cidr string) bool {
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	for _, p := range a.pools {
		if p.Prefix.Overlaps(pfx) && p.Prefix.Bits() <= pfx.Bits() {
			return true
		}
	}
	return false
}

// Allocate returns one free block per IP family the pools cover (IPv4 first, the order Kubernetes expects
// for dual-stack podCIDRs), lowest address first so allocation is deterministic. It is all or nothing:
// Node.spec.podCIDRs can be set only once.
func (a *Allocator) Allocate() ([]string, error) {
	type pick struct {
		p *Pool
		i uint64
	}
	var picks []pick
	for _, v4 := range []bool{true, false} {
		covered, found := false, false
		for _, p := range a.pools {
			if p.Prefix.Addr().Is4() != v4 {
				continue
			}
			covered = true
			if i, ok := p.free(); ok {
				picks = append(picks, pick{p, i})
				found = true
				break
			}
		}
		if covered && !found {
			fam := "IPv4"
			if !v4 {
				fam = "IPv6"
			}
			return nil, fmt.Errorf("failed to allocate an %s block: %w", fam, ErrExhausted)
		}
	}
	out := make([]string, 0, len(picks))
	for _, pk := range picks {
		pk.p.used[pk.i] = struct{}{}
		pk.p.next = pk.i + 1
		out = append(out, pk.p.block(pk.i).String())
	}
	return out, nil
}

// free finds a free index starting from the cursor, which is 0 in a freshly built Allocator (so the
// lowest free block wins, deterministically) and moves past each allocation (so a burst of N
// allocations from one Allocator is O(N) rather than O(N²)).
func (p *Pool) free() (uint64, bool) {
	if uint64(len(p.used)) >= p.size {
		return 0, false
	}
	for i := uint64(0); i < p.size; i++ {
		j := (p.next + i) % p.size
		if _, taken := p.used[j]; !taken {
			return j, true
		}
	}
	return 0, false
}

// Usage is how many blocks are allocated and the capacity, for the family with fewer free blocks (the
// binding limit for dual-stack nodes).
func (a *Allocator) Usage() (allocated, capacity int64) {
	var used, size [2]uint64
	var seen [2]bool
	for _, p := range a.pools {
		f := 0
		if p.Prefix.Addr().Is6() {
			f = 1
		}
		seen[f] = true
		used[f] += uint64(len(p.used))
		size[f] += p.size
	}
	found, best := false, 0
	for f := range 2 {
		if seen[f] && (!found || size[f]-used[f] < size[best]-used[best]) {
			found, best = true, f
		}
	}
	if !found {
		return 0, 0
	}
	return int64(used[best]), int64(size[best]) //nolint:gosec // sizes are capped at 2^62.
}

// maxBlockSize is the longest block of pool p's family.
func maxBlockSize(p netip.Prefix) int {
	if p.Addr().Is4() {
		return MaxBlockSizeIPv4
	}
	return MaxBlockSizeIPv6
}
