package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
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
	ips := cniResult(g, out)
	addr := netip.MustParsePrefix(ips[0].Address)
	g.Expect(netip.MustParsePrefix("10.77.3.0/24").Contains(addr.Addr())).To(BeTrue())
	g.Expect(ips[0].Gateway).To(Equal("10.77.3.1"))
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

// The node's WireGuard slot-1 address (desired.SlotAddr: the tunnel prefix's last address but one) is kept
// out of host-local's range, so no pod can hold the address the node puts on its WireGuard device during a
// key rotation. Checked by letting Debian's host-local plugin hand out a /29 until it runs dry: the pods get
// .2–.5, never the gateway .1, the slot-1 address .6 or the broadcast .7.
func TestCNIConfigKeepsTheSlotAddressFromPods(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	// Only the tunnel prefix (the first IPv4 pod CIDR) has slot addresses.
	g.Expect(WriteCNIConfig(dir, "br0", []string{"fd00:10:77::/64", "10.77.3.0/24", "10.77.9.0/24"}, 1430)).To(Succeed())
	g.Expect(ipamRanges(g, dir)).To(Equal([][]map[string]string{
		{{"subnet": "fd00:10:77::/64"}}, {{"subnet": "10.77.3.0/24", "rangeEnd": "10.77.3.253"}}, {{"subnet": "10.77.9.0/24"}}}))
	g.Expect(WriteCNIConfig(dir, "br0", []string{"10.77.0.0/31"}, 1430)).To(Succeed())
	g.Expect(ipamRanges(g, dir)).To(Equal([][]map[string]string{{{"subnet": "10.77.0.0/31"}}}), "no slot-1 address to keep out")

	g.Expect(WriteCNIConfig(dir, "br0", []string{"10.77.4.0/29"}, 1430)).To(Succeed())
	s1, err := desired.SlotAddr(netip.MustParsePrefix("10.77.4.0/29"), 1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s1.String()).To(Equal("10.77.4.6"))
	b, err := os.ReadFile(filepath.Join(dir, "10-yonder.conflist"))
	g.Expect(err).NotTo(HaveOccurred())
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	g.Expect(json.Unmarshal(b, &list)).To(Succeed())
	ipam := list.Plugins[0]["ipam"].(map[string]any)
	ipam["dataDir"] = filepath.Join(dir, "ipam")
	in, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "yonder", "ipam": ipam})
	g.Expect(err).NotTo(HaveOccurred())
	var got []string
	for i := range 5 {
		c := exec.Command("/usr/lib/cni/host-local")
		c.Env = []string{"CNI_COMMAND=ADD", fmt.Sprintf("CNI_CONTAINERID=slot-%d", i), "CNI_NETNS=/dev/null",
			"CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni"}
		c.Stdin = bytes.NewReader(in)
		out, err := c.CombinedOutput()
		if i == 4 {
			g.Expect(err).To(HaveOccurred(), "the range is exhausted: %s", out)
			break
		}
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		ips := cniResult(g, out)
		g.Expect(ips[0].Gateway).To(Equal("10.77.4.1"))
		got = append(got, netip.MustParsePrefix(ips[0].Address).Addr().String())
	}
	g.Expect(got).To(ConsistOf("10.77.4.2", "10.77.4.3", "10.77.4.4", "10.77.4.5"))
}

// cniIP is one address of a CNI ADD result.
type cniIP struct {
	Address string `json:"address"`
	Gateway string `json:"gateway"`
}

// cniResult decodes a plugin's ADD result, which must hold exactly one address.
func cniResult(g *WithT, out []byte) []cniIP {
	var res struct {
		IPs []cniIP `json:"ips"`
	}
	g.Expect(json.Unmarshal(out, &res)).To(Succeed(), string(out))
	g.Expect(res.IPs).To(HaveLen(1))
	return res.IPs
}

func ipamRanges(g *WithT, dir string) [][]map[string]string {
	b, err := os.ReadFile(filepath.Join(dir, "10-yonder.conflist"))
	g.Expect(err).NotTo(HaveOccurred())
	var list struct {
		Plugins []struct {
			IPAM struct {
				Ranges [][]map[string]string `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	g.Expect(json.Unmarshal(b, &list)).To(Succeed())
	return list.Plugins[0].IPAM.Ranges
}
