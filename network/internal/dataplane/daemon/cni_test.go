package daemon

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
)

// TestCNIConfigWithRealPlugins writes the conflist and runs Debian's bridge + host-local plugins with it
// against a real pod namespace: the pod gets an address from the node's pod CIDR, the tunnel MTU and a
// default route via the bridge.
func TestCNIConfigWithRealPlugins(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(WriteCNIConfig(dir, "br0", []string{"10.77.3.0/24"}, 1430)).To(Succeed())
	path := filepath.Join(dir, "10-yonder.conflist")
	st1, err := os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(WriteCNIConfig(dir, "br0", []string{"10.77.3.0/24"}, 1430)).To(Succeed())
	st2, _ := os.Stat(path)
	g.Expect(st2.ModTime()).To(Equal(st1.ModTime()), "an unchanged config is not rewritten")

	b, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	g.Expect(json.Unmarshal(b, &list)).To(Succeed())
	conf := list.Plugins[0]
	conf["cniVersion"], conf["name"] = list.CNIVersion, list.Name
	conf["ipam"].(map[string]any)["dataDir"] = filepath.Join(dir, "ipam") // keep host-local state per test
	in, err := json.Marshal(conf)
	g.Expect(err).NotTo(HaveOccurred())

	lab := topo.New(t)
	node, pod := lab.AddNS("cni"), lab.AddNS("cnipod")
	c := topo.In(node, "/usr/lib/cni/bridge")
	c.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + lab.Prefix, "CNI_NETNS=/run/netns/" + pod, "CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni"}
	c.Stdin = bytes.NewReader(in)
	out, err := c.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	var res struct {
		IPs []struct {
			Address string `json:"address"`
			Gateway string `json:"gateway"`
		} `json:"ips"`
	}
	g.Expect(json.Unmarshal(out, &res)).To(Succeed(), string(out))
	g.Expect(res.IPs).To(HaveLen(1))
	addr := netip.MustParsePrefix(res.IPs[0].Address)
	g.Expect(netip.MustParsePrefix("10.77.3.0/24").Contains(addr.Addr())).To(BeTrue())
	g.Expect(res.IPs[0].Gateway).To(Equal("10.77.3.1"))
	mtu, err := lab.Exec(pod, "cat", "/proc/self/net/dev") // the pod's interfaces exist
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mtu).To(ContainSubstring("eth0"))
	link, err := lab.Exec(pod, "ip", "-o", "link", "show", "eth0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(link).To(ContainSubstring("mtu 1430"))
	routes, err := lab.Exec(pod, "ip", "route")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes).To(ContainSubstring("default via 10.77.3.1"))
}
