package ipam

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

func TestAllocate(t *testing.T) {
	cases := []struct {
		name    string
		pools   []netv1.PodCIDRPool
		used    []string
		want    [][]string
		wantErr error
	}{
		{name: "first block of an IPv4 pool", pools: []netv1.PodCIDRPool{{CIDR: "10.1.0.0/16"}}, want: [][]string{{"10.1.0.0/24"}}},
		{name: "skips used blocks, fills holes lowest first", pools: []netv1.PodCIDRPool{{CIDR: "10.1.0.0/16"}},
			used: []string{"10.1.0.0/24", "10.1.2.0/24"}, want: [][]string{{"10.1.1.0/24"}, {"10.1.3.0/24"}}},
		{name: "custom block size", pools: []netv1.PodCIDRPool{{CIDR: "10.1.0.0/24", BlockSize: 26}},
			want: [][]string{{"10.1.0.0/26"}, {"10.1.0.64/26"}, {"10.1.0.128/26"}, {"10.1.0.192/26"}}},
		{name: "dual stack gives IPv4 then IPv6", pools: []netv1.PodCIDRPool{{CIDR: "fd00:1::/56"}, {CIDR: "10.1.0.0/16"}},
			want: [][]string{{"10.1.0.0/24", "fd00:1::/64"}, {"10.1.1.0/24", "fd00:1:0:1::/64"}}},
		{name: "second pool of a family after the first is full", pools: []netv1.PodCIDRPool{{CIDR: "10.1.0.0/24"}, {CIDR: "10.2.0.0/24"}},
			want: [][]string{{"10.1.0.0/24"}, {"10.2.0.0/24"}}},
		{name: "exhaustion", pools: []netv1.PodCIDRPool{{CIDR: "10.1.0.0/23"}}, used: []string{"10.1.0.0/24", "10.1.1.0/24"}, wantErr: ErrExhausted},
		{name: "dual stack is all or nothing", pools: []netv1.PodCIDRPool{{CIDR: "10.1.0.0/24"}, {CIDR: "fd00::/64"}},
			used: []string{"10.1.0.0/24"}, wantErr: ErrExhausted},
		{name: "CIDRs outside the pools are ignored", pools: []netv1.PodCIDRPool{{CIDR: "10.1.0.0/16"}}, used: []string{"10.9.0.0/24", "garbage"},
			want: [][]string{{"10.1.0.0/24"}}},
		{name: "huge IPv6 pool", pools: []netv1.PodCIDRPool{{CIDR: "fd00::/8"}}, used: []string{"fd00::/64"}, want: [][]string{{"fd00:0:0:1::/64"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, err := New(tc.pools)
			g.Expect(err).NotTo(HaveOccurred())
			for _, u := range tc.used {
				a.MarkUsed(u)
			}
			for _, w := range tc.want {
				got, err := a.Allocate()
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(w))
			}
			if tc.wantErr != nil {
				_, err := a.Allocate()
				g.Expect(errors.Is(err, tc.wantErr)).To(BeTrue(), "got %v", err)
			}
		})
	}
}

func TestParsePoolRejectsImpossibleSettings(t *testing.T) {
	for _, p := range []netv1.PodCIDRPool{
		{CIDR: "10.1.0.0/16", BlockSize: 8},  // block larger than the pool
		{CIDR: "10.1.0.0/16", BlockSize: 33}, // longer than an IPv4 address
		{CIDR: "10.1.0.0/16", BlockSize: 30}, // no address left for a pod
		{CIDR: "10.1.0.0/30", BlockSize: 32},
		{CIDR: "fd00::/64", BlockSize: 126},
		{CIDR: "10.1.0.1/16"}, // host bits
		{CIDR: "not-a-cidr"},
	} {
		_, err := ParsePool(p)
		NewWithT(t).Expect(err).To(HaveOccurred(), "%+v", p)
	}
}

func TestUsage(t *testing.T) {
	g := NewWithT(t)
	a, err := New([]netv1.PodCIDRPool{{CIDR: "10.1.0.0/22"}, {CIDR: "fd00::/60"}})
	g.Expect(err).NotTo(HaveOccurred())
	a.MarkUsed("10.1.0.0/24")
	a.MarkUsed("10.1.1.0/24")
	alloc, capacity := a.Usage()
	// IPv4 has 2 of 4 free, IPv6 16 of 16: IPv4 binds.
	g.Expect(alloc).To(Equal(int64(2)))
	g.Expect(capacity).To(Equal(int64(4)))
	g.Expect(a.Contains("10.1.3.0/24")).To(BeTrue())
	g.Expect(a.Contains("10.2.0.0/24")).To(BeFalse())
}
