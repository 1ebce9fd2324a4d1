package daemon

import (
	"testing"

	. "github.com/onsi/gomega"
)

// The underlay is the named device when one is named (a missing one is an error that names it), else the
// interface holding the node's address: loopback holds 127.0.0.1 on every machine, so the lookup by
// address is checked against the real kernel without depending on this machine's NICs.
func TestResolveUnderlay(t *testing.T) {
	g := NewWithT(t)
	g.Expect(ResolveUnderlay("lo", "")).To(Equal("lo"))
	_, err := ResolveUnderlay("yonder-no-such-nic", "")
	g.Expect(err).To(MatchError(ContainSubstring("yonder-no-such-nic")))
	g.Expect(ResolveUnderlay("", "127.0.0.1")).To(Equal("lo"), "the interface holding the node address")
	g.Expect(ResolveUnderlay("", "::1")).To(Equal("lo"))
}
