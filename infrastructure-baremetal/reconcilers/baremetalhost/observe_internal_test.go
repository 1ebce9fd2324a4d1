package baremetalhost

import (
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/yonder-dev/yonder/pkg/condevents"
)

// The gauge's labels stay within Metal3's states and statuses, whatever a status writer put there.
func TestHostLabels(t *testing.T) {
	for _, tc := range []struct {
		name        string
		state       metal3v1.ProvisioningState
		status      metal3v1.OperationalStatus
		annotations map[string]string
		wantState   string
		wantStatus  string
	}{
		{name: "new", wantState: "none", wantStatus: "none"},
		{name: "available", state: metal3v1.StateAvailable, status: metal3v1.OperationalStatusOK, wantState: "available", wantStatus: "OK"},
		{name: "spaces kept as Metal3 spells them", state: metal3v1.StatePoweringOffBeforeDelete, status: metal3v1.OperationalStatusError, wantState: "powering off before delete", wantStatus: "error"},
		{name: "detached annotation", state: metal3v1.StateProvisioned, status: metal3v1.OperationalStatusOK,
			annotations: map[string]string{metal3v1.DetachedAnnotation: ""}, wantState: "provisioned", wantStatus: "detached"},
		{name: "unknown values", state: "10.0.0.1 secret", status: "whatever", wantState: "other", wantStatus: "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h := &metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}
			h.Status.Provisioning.State = tc.state
			h.Status.OperationalStatus = tc.status
			g.Expect(stateLabel(h)).To(Equal(tc.wantState))
			g.Expect(statusLabel(h)).To(Equal(tc.wantStatus))
		})
	}
}

// Each step a provisioning goes through on its way to Provisioned is a Normal Event, whichever passes
// observe it (a fast ramdisk may report before a pass sees WritingImage, a slow one after: CI saw a
// Warning for it once); what went wrong is a Warning.
func TestHostConditionEventTypes(t *testing.T) {
	for reason, want := range map[string]string{
		BareMetalHostWaitingForPXEBootReason:  "Normal",
		BareMetalHostWritingImageReason:       "Normal",
		BareMetalHostStartingNodeReason:       "Normal",
		BareMetalHostFetchingLiveISOReason:    "Normal",
		BareMetalHostCleaningReason:           "Normal",
		BareMetalHostPXEBootTimeoutReason:     "Warning",
		BareMetalHostImageWriteFailedReason:   "Warning",
		BareMetalHostNodeStartFailedReason:    "Warning",
		BareMetalHostLiveISOUnavailableReason: "Warning",
		BareMetalHostCleaningFailedReason:     "Warning",
		BareMetalHostAttestationFailedReason:  "Warning",
	} {
		t.Run(reason, func(t *testing.T) {
			g := NewWithT(t)
			rec := record.NewFakeRecorder(4)
			before := []metav1.Condition{{Type: BareMetalHostProvisionedCondition, Status: metav1.ConditionFalse, Reason: BareMetalHostWaitingForPXEBootReason}}
			if reason == BareMetalHostWaitingForPXEBootReason {
				before = nil
			}
			after := []metav1.Condition{{Type: BareMetalHostProvisionedCondition, Status: metav1.ConditionFalse, Reason: reason, Message: "m"}}
			condevents.Record(rec, &metal3v1.BareMetalHost{}, hostConditionEvents, before, after)
			g.Expect(rec.Events).To(Receive(Equal(want + " " + reason + " " + BareMetalHostProvisionedCondition + " is False: m")))
		})
	}
}
