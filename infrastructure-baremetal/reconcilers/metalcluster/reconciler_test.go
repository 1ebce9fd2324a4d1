package metalcluster

import (
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

func TestFailureDomainsFromSpecAndSelectedHosts(t *testing.T) {
	g := NewWithT(t)
	h := func(name, fd, pool string) metal3v1.BareMetalHost {
		return metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{infrav1.FailureDomainLabel: fd, "pool": pool}}}
	}
	hosts := []metal3v1.BareMetalHost{h("a", "rack-2", "p"), h("b", "rack-1", "p"), h("c", "rack-1", "p"), h("d", "rack-9", "q"), h("e", "", "p")}
	sel := labels.SelectorFromSet(labels.Set{"pool": "p"})
	g.Expect(FailureDomains([]string{"rack-0"}, hosts, sel)).To(Equal([]clusterv1.FailureDomain{
		{Name: "rack-0", ControlPlane: ptr.To(false)}, {Name: "rack-1", ControlPlane: ptr.To(false)}, {Name: "rack-2", ControlPlane: ptr.To(false)}}))
	g.Expect(FailureDomains(nil, nil, labels.Everything())).To(BeEmpty())
}
