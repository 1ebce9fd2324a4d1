package baremetalhost

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

// The versions a pass's own writes replaced are held back until a pass reads a current version; a no-op
// write replaced nothing, and a record is trusted only for ownWritesTTL.
func TestOwnWrites(t *testing.T) {
	g := NewWithT(t)
	h, other := types.NamespacedName{Namespace: "ns", Name: "h"}, types.NamespacedName{Namespace: "ns", Name: "o"}
	var o ownWrites
	g.Expect(o.outdated(h, "1")).To(BeFalse(), "nothing written yet")

	o.wrote(h, "1", "2") // metadata patch
	o.wrote(h, "2", "3") // status patch
	o.wrote(h, "3", "3") // a no-op patch keeps the version: it replaced nothing
	g.Expect(o.outdated(h, "1")).To(BeTrue())
	g.Expect(o.outdated(h, "2")).To(BeTrue(), "the intermediate version between the two patches")
	g.Expect(o.outdated(h, "3")).To(BeFalse(), "the version the pass left")
	g.Expect(o.outdated(other, "1")).To(BeFalse(), "per host")

	o.start(h)
	g.Expect(o.outdated(h, "1")).To(BeFalse(), "a pass that read a current version forgets the old ones")

	o.wrote(h, "3", "4")
	r := o.replaced[h]
	r.at = time.Now().Add(-ownWritesTTL - time.Second)
	o.replaced[h] = r
	g.Expect(o.outdated(h, "3")).To(BeFalse(), "an old record is not trusted: the newer version should have arrived long ago")
}
