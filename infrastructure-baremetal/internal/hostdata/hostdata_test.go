package hostdata_test

import (
	"context"
	"net/netip"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostdata"
)

// CAPM3's network_data (YAML here, as a Metal3DataTemplate's Secret may hold it): static IPv4 and IPv6
// networks give their addresses, DHCP and SLAAC networks none; a CIDR is read as its address; a repeated
// address counts once.
func TestStaticAddressesOfNetworkData(t *testing.T) {
	g := NewWithT(t)
	nd := []byte(`links:
- {id: bond0, type: bond, bond_links: [nic0, nic1]}
networks:
- {id: lease, type: ipv4_dhcp, link: bond0}
- {id: prov, type: ipv4, link: bond0, ip_address: 192.168.10.5, netmask: 255.255.255.0}
- {id: v6, type: ipv6, link: bond0, ip_address: "2001:db8::5/64"}
- {id: slaac, type: ipv6_slaac, link: bond0}
- {id: again, type: ipv4, link: bond0, ip_address: 192.168.10.5}
`)
	got, err := hostdata.StaticAddresses(nd)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]netip.Addr{netip.MustParseAddr("192.168.10.5"), netip.MustParseAddr("2001:db8::5")}))

	_, err = hostdata.StaticAddresses([]byte(`{"networks": [{"type": "ipv4", "ip_address": "10.0.0.300"}]}`))
	g.Expect(err).To(MatchError(ContainSubstring(`networks[0].ip_address "10.0.0.300" is not an IP address`)))
	_, err = hostdata.StaticAddresses([]byte(`{"networks": 7}`))
	g.Expect(err).To(MatchError(ContainSubstring("not OpenStack's network_data format")))
	got, err = hostdata.StaticAddresses([]byte(`{"links": []}`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())
}

// The Secrets a host names are read from its namespace, YAML or JSON; a host that names none has none; a
// missing key, a Secret elsewhere or a value that is not a map are errors naming the field.
func TestReadingAHostsDataSecrets(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	secret := func(name, key, value string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "rack", Name: name}, Data: map[string][]byte{key: []byte(value)}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		secret("md", "metaData", "hostname: edge-7\nrack: r2\n"),
		secret("nd", "networkData", "networks:\n- {type: ipv4, ip_address: 10.0.0.7}\n"),
		secret("list", "metaData", "- a\n- b\n"),
		secret("other-key", "value", "x"),
	).Build()
	h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Namespace: "rack", Name: "h7"}}

	md, err := hostdata.MetaData(ctx, c, h)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(md).To(BeNil(), "no spec.metaData")
	nd, err := hostdata.NetworkData(ctx, c, h)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nd).To(BeNil(), "no spec.networkData")

	h.Spec.MetaData = &corev1.SecretReference{Name: "md"}
	h.Spec.NetworkData = &corev1.SecretReference{Name: "nd", Namespace: "rack"}
	md, err = hostdata.MetaData(ctx, c, h)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(md).To(Equal(map[string]any{"hostname": "edge-7", "rack": "r2"}))
	g.Expect(hostdata.Hostname(md)).To(Equal("edge-7"))
	g.Expect(hostdata.Hostname(map[string]any{"local-hostname": "x"})).To(BeEmpty(), "cloud-init's ConfigDrive names the OS after hostname")
	nd, err = hostdata.NetworkData(ctx, c, h)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nd).To(MatchJSON(`{"networks": [{"type": "ipv4", "ip_address": "10.0.0.7"}]}`))

	h.Spec.MetaData = &corev1.SecretReference{Name: "list"}
	_, err = hostdata.MetaData(ctx, c, h)
	g.Expect(err).To(MatchError(ContainSubstring("the spec.metaData Secret of rack/h7: key metaData is not a YAML or JSON map")))
	h.Spec.MetaData = &corev1.SecretReference{Name: "other-key"}
	_, err = hostdata.MetaData(ctx, c, h)
	g.Expect(err).To(MatchError(ContainSubstring("the spec.metaData Secret rack/other-key has none of the keys metaData")))
	h.Spec.MetaData = &corev1.SecretReference{Name: "md", Namespace: "elsewhere"}
	_, err = hostdata.MetaData(ctx, c, h)
	g.Expect(err).To(MatchError(ContainSubstring("spec.metaData names Secret elsewhere/md in another namespace than the host's")))
	h.Spec.NetworkData = &corev1.SecretReference{Name: "gone"}
	_, err = hostdata.NetworkData(ctx, c, h)
	g.Expect(err).To(MatchError(ContainSubstring("failed to get the spec.networkData Secret of rack/h7")))
}
