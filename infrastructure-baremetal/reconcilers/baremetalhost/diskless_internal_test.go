package baremetalhost

import (
	"testing"

	. "github.com/onsi/gomega"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// A provisioned host is deprovisioned (and provisioned again if its spec asks) when what it deployed is
// withdrawn or changed: its image, or its custom deploy; a diskless host that gets an image instead, or
// an image host that becomes diskless, as an image change.
func TestDeployWithdrawn(t *testing.T) {
	img := func(url string) *metal3v1.Image { return &metal3v1.Image{URL: url} }
	cd := func(m string) *metal3v1.CustomDeploy { return &metal3v1.CustomDeploy{Method: m} }
	for _, tc := range []struct {
		name      string
		spec      metal3v1.BareMetalHostSpec
		st        HostState
		withdrawn bool
	}{
		{name: "same image", spec: metal3v1.BareMetalHostSpec{Image: img("http://a")}, st: HostState{Image: img("http://a")}},
		{name: "image changed", spec: metal3v1.BareMetalHostSpec{Image: img("http://b")}, st: HostState{Image: img("http://a")}, withdrawn: true},
		{name: "image removed", st: HostState{Image: img("http://a")}, withdrawn: true},
		{name: "image host becomes diskless", spec: metal3v1.BareMetalHostSpec{CustomDeploy: cd(infrav1.DisklessDeployMethod)},
			st: HostState{Image: img("http://a")}, withdrawn: true},
		{name: "diskless stays", spec: metal3v1.BareMetalHostSpec{CustomDeploy: cd(infrav1.DisklessDeployMethod)},
			st: HostState{CustomDeploy: cd(infrav1.DisklessDeployMethod)}},
		{name: "diskless withdrawn", st: HostState{CustomDeploy: cd(infrav1.DisklessDeployMethod)}, withdrawn: true},
		{name: "diskless method changed", spec: metal3v1.BareMetalHostSpec{CustomDeploy: cd("other")},
			st: HostState{CustomDeploy: cd(infrav1.DisklessDeployMethod)}, withdrawn: true},
		{name: "diskless host gets an image", spec: metal3v1.BareMetalHostSpec{Image: img("http://a")},
			st: HostState{CustomDeploy: cd(infrav1.DisklessDeployMethod)}, withdrawn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(deployWithdrawn(&metal3v1.BareMetalHost{Spec: tc.spec}, tc.st)).To(Equal(tc.withdrawn))
		})
	}
}

// The status of a provisioned diskless host is derived from its state like an image host's: after
// clusterctl move, or a pass whose status write was lost.
func TestRestoreDisklessStatus(t *testing.T) {
	g := NewWithT(t)
	h := &metal3v1.BareMetalHost{}
	restoreStatus(h, HostState{State: metal3v1.StateProvisioned, CustomDeploy: &metal3v1.CustomDeploy{Method: infrav1.DisklessDeployMethod}})
	g.Expect(h.Status.Provisioning.CustomDeploy).To(Equal(&metal3v1.CustomDeploy{Method: infrav1.DisklessDeployMethod}))
	g.Expect(h.Status.Provisioning.Image.URL).To(BeEmpty())
	g.Expect(h.Status.Conditions).To(ContainElement(And(HaveField("Type", BareMetalHostProvisionedCondition),
		HaveField("Message", ContainSubstring("runs the Node diskless")))))
	restoreStatus(h, HostState{State: metal3v1.StateAvailable})
	g.Expect(h.Status.Provisioning.CustomDeploy).To(BeNil())
}
