package yonderconfig

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// CAPI's patch helper writes a Cluster's conditions before the rest of its status, so the control plane
// becomes initialized in two updates. The watch must pass the update our reconcile can act on: the one that
// sets status.initialization.controlPlaneInitialized, whether or not the condition came first.
func TestControlPlaneInitializedSetFollowsTheFieldTheReconcileReads(t *testing.T) {
	g := NewWithT(t)
	initializedCondition := metav1.Condition{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue, Reason: "Initialized"}
	fresh := &clusterv1.Cluster{}
	conditionOnly := fresh.DeepCopy()
	conditionOnly.Status.Conditions = []metav1.Condition{initializedCondition}
	both := conditionOnly.DeepCopy()
	both.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	fieldOnly := fresh.DeepCopy()
	fieldOnly.Status.Initialization.ControlPlaneInitialized = ptr.To(true)

	p := controlPlaneInitializedSet()
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: fresh, ObjectNew: conditionOnly})).To(BeFalse(), "the condition alone: the field still reads false")
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: conditionOnly, ObjectNew: both})).To(BeTrue(), "the status write after the conditions write")
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: fresh, ObjectNew: fieldOnly})).To(BeTrue())
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: both, ObjectNew: both})).To(BeFalse(), "no transition")
	g.Expect(p.Create(event.CreateEvent{Object: both})).To(BeFalse())
}
