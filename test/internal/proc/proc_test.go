package proc

import (
	"testing"

	. "github.com/onsi/gomega"
)

// Ports asked for one after another are all different: the kernel may offer a port it has just freed
// again, and etcd once got the same port for its client and peer listeners.
func TestFreePortNeverReturnsAPortTwice(t *testing.T) {
	g := NewWithT(t)
	seen := map[int]bool{}
	for range 500 {
		p, err := FreePort("127.0.0.1")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(seen).NotTo(HaveKey(p), "port %d handed out twice", p)
		seen[p] = true
	}
	g.Expect(handedOut.claim(0)).To(BeTrue())
	g.Expect(handedOut.claim(0)).To(BeFalse(), "a port handed out a moment ago is not handed out again")
}
