package sshmachine_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshmachine"
)

// The bootstrap provider approves kubelet-serving CSRs for the Machine's addresses, so what the host
// says about itself must not become one: a host whose probe reports a forged hostname (a cluster
// service's name, another node's name) gets only its inventory address (spec.address) in the
// YonderSSHMachine's status.addresses, whatever the machine held before.
func TestRecordHostKeepsTheReportedHostnameOutOfTheAddresses(t *testing.T) {
	for name, tc := range map[string]struct {
		address, reported string
		want              []clusterv1.MachineAddress
	}{
		"service name, IP inventory": {"10.0.0.7", "kubernetes.default.svc",
			[]clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.7"}}},
		"another node's name, IPv6 inventory": {"fd00::7", "edge-workers-abcde",
			[]clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "fd00::7"}}},
		"service FQDN, DNS inventory": {"host-7.lab.example", "kubernetes.default.svc.cluster.local",
			[]clusterv1.MachineAddress{{Type: clusterv1.MachineInternalDNS, Address: "host-7.lab.example"}}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			h := &infrav1.YonderSSHHost{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "host-7"},
				Spec:       infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: tc.address}},
				Status:     infrav1.YonderSSHHostStatus{Facts: &infrav1.HostFacts{Hostname: tc.reported}},
			}
			m := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}
			// Left from an earlier claim: replaced, not merged.
			m.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineHostName, Address: tc.reported}}

			(&sshmachine.Adapter{}).RecordHost(m, h)

			g.Expect(m.Status.HostRef).To(Equal("host-7"))
			g.Expect(m.Status.Addresses).To(Equal(tc.want))
			for _, a := range m.Status.Addresses {
				g.Expect(a.Address).NotTo(Equal(tc.reported), "the hostname the host reports is not an address")
			}
		})
	}
}
