package baremetalhost

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
)

// Which reboot annotations a host honours, and in which mode (BMO's rules: not provisioned → only forced
// ones; hard wins; a value that is not JSON is soft; other annotations sharing the prefix text are not ours).
func TestReadRebootRequest(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		provisioned bool
		want        rebootRequest
	}{
		{name: "none", annotations: map[string]string{"reboot.metal3.io.example/x": "", "other": ""}, provisioned: true},
		{name: "bare soft", annotations: map[string]string{"reboot.metal3.io": ""}, provisioned: true, want: rebootRequest{once: true}},
		{name: "keyed, hard wins", provisioned: true,
			annotations: map[string]string{"reboot.metal3.io/b": `{"mode":"soft"}`, "reboot.metal3.io/a": `{"mode":"hard"}`},
			want:        rebootRequest{held: []string{"reboot.metal3.io/a", "reboot.metal3.io/b"}, hard: true}},
		{name: "invalid JSON is soft", annotations: map[string]string{"reboot.metal3.io/x": "{hard"}, provisioned: true,
			want: rebootRequest{held: []string{"reboot.metal3.io/x"}, invalid: []string{"reboot.metal3.io/x"}}},
		{name: "available host: unforced ignored", annotations: map[string]string{"reboot.metal3.io": "", "reboot.metal3.io/x": `{"mode":"hard"}`}},
		{name: "available host: forced honoured",
			annotations: map[string]string{"reboot.metal3.io/x": `{"mode":"hard","force":true}`, "reboot.metal3.io/y": ""},
			want:        rebootRequest{held: []string{"reboot.metal3.io/x"}, hard: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}
			g.Expect(readRebootRequest(h, tc.provisioned)).To(Equal(tc.want))
		})
	}
}

// Provisioning and deprovisioning serve a one-shot reboot request (the host boots anew) and keep keyed ones;
// a status copy is dropped once the host has a status; inspect.metal3.io waits on a provisioned host.
func TestApplyAnnotationsClearsServedRequests(t *testing.T) {
	for _, st := range []metal3v1.ProvisioningState{metal3v1.StateProvisioning, metal3v1.StateDeprovisioning, metal3v1.StateProvisioned} {
		t.Run(string(st), func(t *testing.T) {
			g := NewWithT(t)
			h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
				metal3v1.RebootAnnotationPrefix: "", metal3v1.RebootAnnotationPrefix + "/capm3": "",
				metal3v1.StatusAnnotation: "{}", metal3v1.InspectAnnotationPrefix: "",
			}}}
			s := &scope{host: h, state: HostState{State: st}}
			g.Expect((&Reconciler{}).applyAnnotations(context.Background(), s)).To(BeFalse())
			g.Expect(h.Annotations).To(HaveKey(metal3v1.RebootAnnotationPrefix + "/capm3"))
			g.Expect(h.Annotations).To(HaveKey(metal3v1.InspectAnnotationPrefix))
			g.Expect(h.Annotations).NotTo(HaveKey(metal3v1.StatusAnnotation))
			if st == metal3v1.StateProvisioned {
				g.Expect(h.Annotations).To(HaveKey(metal3v1.RebootAnnotationPrefix), "a provisioned host reboots for it")
			} else {
				g.Expect(h.Annotations).NotTo(HaveKey(metal3v1.RebootAnnotationPrefix))
			}
		})
	}
}
