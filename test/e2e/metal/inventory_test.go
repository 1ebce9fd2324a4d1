package metal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
)

// hostInventory is what an operator's inventory record says about the host beyond its BMC and boot NIC,
// the Metal3 way: its network configuration (OpenStack network_data.json, what CAPM3's Metal3DataTemplate
// renders) in the BareMetalHost's spec.networkData Secret and its metadata in spec.metaData. Every Machine
// that claims the host gets both on its config drive; the image's cloud-init applies them.
type hostInventory struct {
	// hostname is the metaData Secret's hostname: cloud-init sets it (it wins over the host's name).
	hostname string
	// static is the networkData's static address on the boot NIC, beside the DHCP lease the same NIC keeps.
	// It lies in a range nothing on this machine routes, so only the host's own report can show it.
	static netip.Prefix
}

// describeHost writes the host's network and metadata into its inventory record before any Machine exists,
// as an operator does: networkData keeps DHCP on the boot NIC (the Node's address is its lease) and adds a
// static address; metaData names the host.
func (l *metalLife) describeHost(t *testing.T) *hostInventory {
	t.Helper()
	g := NewWithT(t)
	tok := make([]byte, 4)
	_, _ = rand.Read(tok)
	boot := l.host.BootAddress.As4()
	inv := &hostInventory{hostname: "rack-" + hex.EncodeToString(tok),
		static: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, boot[2], 150}), 24)}
	network := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: st.HostNamespace, Name: l.host.Name + "-network-data"},
		Data: map[string][]byte{"networkData": []byte(networkData(l.host.MAC, inv.static))}}
	meta := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: st.HostNamespace, Name: l.host.Name + "-meta-data"},
		Data: map[string][]byte{"metaData": []byte("hostname: " + inv.hostname + "\n")}}
	for _, s := range []*corev1.Secret{network, meta} {
		g.Expect(st.Client.Create(l.ctx, s)).To(Succeed())
	}
	setRefs := func(network, meta *corev1.SecretReference) error {
		h := &metal3v1.BareMetalHost{}
		if err := st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: l.host.Name}, h); err != nil {
			return err
		}
		patch := client.MergeFrom(h.DeepCopy())
		h.Spec.NetworkData, h.Spec.MetaData = network, meta
		return st.Client.Patch(l.ctx, h, patch)
	}
	g.Expect(setRefs(&corev1.SecretReference{Namespace: st.HostNamespace, Name: network.Name},
		&corev1.SecretReference{Namespace: st.HostNamespace, Name: meta.Name})).To(Succeed())
	// The stack's host goes back to its bare record for the tests after this one.
	t.Cleanup(func() {
		ctx := context.WithoutCancel(l.ctx)
		if err := setRefs(nil, nil); err != nil {
			t.Errorf("restoring the BareMetalHost's inventory record: %v", err)
		}
		for _, s := range []*corev1.Secret{network, meta} {
			if err := client.IgnoreNotFound(st.Client.Delete(ctx, s)); err != nil {
				t.Errorf("deleting Secret %s: %v", s.Name, err)
			}
		}
	})
	return inv
}

// expectApplied checks what the host's disk-booted OS says on its serial console about its first boot:
// cloud-init read the config drive, configured network_data.json's static address next to the DHCP lease
// (its "Net device info" table) and set the metaData's hostname (the login prompt names it). The lease stays
// the host's address: nodeReady saw the Node register it.
func (inv *hostInventory) expectApplied(t *testing.T, l *metalLife) {
	t.Helper()
	g := NewWithT(t)
	static := regexp.MustCompile(`ci-info: .*\|\s+` + regexp.QuoteMeta(inv.static.Addr().String()) + `\s+\|\s+255\.255\.255\.0\s`)
	prompt := regexp.MustCompile(regexp.QuoteMeta(inv.hostname) + ` login:`)
	// cloud-init's final stage (its runcmd bootstraps the node) prints its closing line after the Node may
	// already be Ready.
	g.Eventually(func(g Gomega) {
		console := st.MetalConsole(l.host.Name)
		g.Expect(console).To(ContainSubstring("Datasource DataSourceConfigDrive"), "cloud-init read the config drive")
		g.Expect(static.MatchString(console)).To(BeTrue(), "cloud-init configured the networkData's static address %s", inv.static)
		g.Expect(prompt.MatchString(console)).To(BeTrue(), "the host is named %s, the metaData's hostname", inv.hostname)
	}, 3*time.Minute, 2*time.Second).Should(Succeed(), func() string { return tail(st.MetalConsole(l.host.Name), 8000) })
}

// expectAppliedDiskless checks what a diskless host's ramdisk says on its console: it set the metaData's
// hostname and configured network_data.json's static address on the boot NIC itself, as cloud-init does
// on a disk image. The lease stays the host's address: nodeReady saw the Node register it.
func (inv *hostInventory) expectAppliedDiskless(t *testing.T, l *metalLife) {
	t.Helper()
	g := NewWithT(t)
	console := st.MetalConsole(l.host.Name)
	g.Expect(console).To(ContainSubstring("diskless: hostname "+inv.hostname), "the ramdisk set the metaData's hostname")
	g.Expect(console).To(MatchRegexp(`diskless: network: network extra: `+regexp.QuoteMeta(inv.static.String())+` on eth0`),
		"the ramdisk configured the networkData's static address %s", inv.static)
}

// networkData is OpenStack's network_data.json as CAPM3 renders it: the boot NIC found by its MAC, DHCP on
// it and one static IPv4 address more.
func networkData(mac string, static netip.Prefix) string {
	return fmt.Sprintf(`{"links": [{"id": "boot0", "type": "phy", "ethernet_mac_address": %q, "mtu": 1500}],
"networks": [{"id": "lease", "type": "ipv4_dhcp", "link": "boot0", "network_id": "lease"},
  {"id": "extra", "type": "ipv4", "link": "boot0", "ip_address": %q, "netmask": "255.255.255.0", "network_id": "extra"}],
"services": []}`, mac, static.Addr().String())
}
