package labnet

import (
	"context"
	"os/exec"
	"testing"

	. "github.com/onsi/gomega"
)

// A test process that dies leaves its bridge, veths, namespaces and the processes inside them behind;
// the kernel drops its slot lock. The next network that takes the slot removes all of it first.
func TestNewRemovesWhatACrashedHolderLeftBehind(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	crashed, err := New(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	att, err := crashed.Attach(ctx, "orphan")
	g.Expect(err).NotTo(HaveOccurred())
	sleeper := exec.Command("nsenter", "--net="+att.NamespacePath, "sleep", "600")
	g.Expect(sleeper.Start()).To(Succeed())
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	// A concurrent holder of another slot must not be disturbed.
	other, err := New(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = other.Close() })

	// Simulate the crash: the lock goes away, nothing is cleaned up; the slot is taken again at once.
	g.Expect(crashed.release()).To(Succeed())
	next, err := takeSlot(ctx, crashed.Slot)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).NotTo(BeNil(), "slot %d was taken by another process in between", crashed.Slot)
	t.Cleanup(func() { _ = next.Close() })
	g.Expect(Exists(att.Namespace)).To(BeFalse(), "the orphaned namespace is gone")
	g.Eventually(exited).Should(Receive(), "the process inside it was killed")
	g.Expect(LinkExists(next.Bridge)).To(BeTrue(), "a fresh bridge was created")
	g.Expect(LinkExists(other.Bridge)).To(BeTrue())
	g.Expect(other.Slot).NotTo(Equal(next.Slot))
}

// Two networks held at once never share a slot, a bridge or a subnet.
func TestConcurrentNetworksAreDisjoint(t *testing.T) {
	g := NewWithT(t)
	a := NewForTest(t)
	b := NewForTest(t)
	g.Expect(a.Slot).NotTo(Equal(b.Slot))
	g.Expect(a.Bridge).NotTo(Equal(b.Bridge))
	g.Expect(a.Prefix.Overlaps(b.Prefix)).To(BeFalse())
}

// The lab routes a remote site's prefix via that site's gateway, a namespace on another lab network. A
// holder killed before it removed that route leaves it behind; the next holder of the slot must not
// inherit it (its hosts would time out), and a route put on the prefix by anything else is named at once.
func TestNewRemovesAStaleRouteToItsPrefix(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	mgmt := NewForTest(t)
	gw, err := mgmt.Attach(ctx, "sitegw")
	g.Expect(err).NotTo(HaveOccurred())
	crashed, err := New(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, args := range [][]string{
		{"addr", "flush", "dev", crashed.Bridge},
		{"route", "replace", crashed.Prefix.String(), "via", gw.Address.String()},
	} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "ip %v: %s", args, out)
	}
	g.Expect(crashed.release()).To(Succeed())

	next, err := takeSlot(ctx, crashed.Slot)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).NotTo(BeNil(), "slot %d was taken by another process in between", crashed.Slot)
	t.Cleanup(func() { _ = next.Close() })
	host, err := next.Attach(ctx, "reached")
	g.Expect(err).NotTo(HaveOccurred())
	out, err := exec.Command("ping", "-c", "1", "-W", "5", host.Address.String()).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "the new holder's host is reachable: %s", out)

	hijack := []string{"route", "add", host.Address.String() + "/32", "via", gw.Address.String()}
	out, err = exec.Command("ip", hijack...).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	t.Cleanup(func() { _ = exec.Command("ip", "route", "del", host.Address.String()+"/32").Run() })
	err = next.checkRouting(ctx)
	g.Expect(err).To(MatchError(ContainSubstring("routes " + host.Address.String())))
	g.Expect(err).To(MatchError(ContainSubstring("via " + gw.Address.String())))
}
