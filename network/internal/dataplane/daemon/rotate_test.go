package daemon

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/keys"
)

// A node whose pod CIDR has no slot-1 address (longer than /30) refuses to rotate into slot 1 before it
// generates a key or tells a peer anything: peers would otherwise need an address the node cannot hold.
func TestRotateRefusesASlotWithoutAddress(t *testing.T) {
	g := NewWithT(t)
	d := &Daemon{slots: keys.Slots{Current: 0, Next: -1}, input: &desired.Input{PodCIDRs: []string{"10.0.0.4/31"}}}
	err := d.Rotate()
	g.Expect(err).To(MatchError(ContainSubstring("failed to start a key rotation")))
	g.Expect(err).To(MatchError(ContainSubstring("no address for WireGuard slot 1")))
	g.Expect(d.slots.Rotating()).To(BeFalse())
}
