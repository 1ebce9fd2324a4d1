package kernel

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// Setup turns on forwarding, turns off reverse-path filtering, and makes conntrack liberal about TCP windows
// where conntrack is loaded (the eBPF fast path hides half of each cross-site flow from each node's
// conntrack); where it is not, its sysctl is not there and Setup does not create it.
func TestSetupWritesForwardingAndConntrackSysctls(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	files := []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/rp_filter", "net/ipv4/conf/default/rp_filter", conntrackLiberal}
	for _, f := range files {
		g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(root, f), []byte("9"), 0o644)).To(Succeed())
	}
	g.Expect(setup(root)).To(Succeed())
	want := map[string]string{files[0]: "1", files[1]: "0", files[2]: "0", conntrackLiberal: "1"}
	for f, v := range want {
		got, err := os.ReadFile(filepath.Join(root, f))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(got)).To(Equal(v), f)
	}

	g.Expect(os.RemoveAll(filepath.Join(root, "net/netfilter"))).To(Succeed())
	g.Expect(setup(root)).To(Succeed())
	g.Expect(filepath.Join(root, conntrackLiberal)).NotTo(BeAnExistingFile(), "no conntrack: nothing to set")
}
