// Package condevents records the condition changes of one reconcile as Events, in Cluster API's reason
// style, the same way for every Yonder controller: an operator who runs `kubectl get events` (or
// `kubectl describe`) sees when a condition turned False and why, and when it recovered.
package condevents

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// Policy says which changes of an object's conditions are news.
type Policy struct {
	// Types are the condition types recorded; empty records every type.
	Types []string
	// Progress are False reasons that mean a step is under way (bootstrap running, provisioning):
	// recorded as Normal Events. Every other False reason is a Warning.
	Progress []string
	// Quiet are False reasons not recorded at all (steps every object takes, e.g. waiting or deleting).
	Quiet func(reason string) bool
	// QuietTrue are types whose turning True is not recorded (another Event of the controller tells it).
	QuietTrue []string
	// FirstTrue records a condition that first appears True (a hand-off finished); without it, only a
	// condition that was False and recovers is recorded.
	FirstTrue bool
}

// Record records one Event per condition of p.Types whose status or reason changed from before to after:
// when it turns False, an Event with its reason and message (Normal for p.Progress, else a Warning);
// when it turns True, a Normal Event named after the condition ("True again" after a failure). Call it only after the write that made
// after real succeeded, so a pass that fails records nothing it did not do.
func Record(rec record.EventRecorder, obj runtime.Object, p Policy, before, after []metav1.Condition) {
	old := make(map[string]metav1.Condition, len(before))
	for _, c := range before {
		old[c.Type] = c
	}
	for _, c := range after {
		was, seen := old[c.Type]
		if (len(p.Types) > 0 && !slices.Contains(p.Types, c.Type)) || (seen && was.Status == c.Status && was.Reason == c.Reason) {
			continue
		}
		switch c.Status {
		case metav1.ConditionFalse:
			if p.Quiet != nil && p.Quiet(c.Reason) {
				continue
			}
			typ := corev1.EventTypeWarning
			if slices.Contains(p.Progress, c.Reason) {
				typ = corev1.EventTypeNormal
			}
			rec.Eventf(obj, typ, c.Reason, "%s is False: %s", c.Type, c.Message)
		case metav1.ConditionTrue:
			switch {
			case slices.Contains(p.QuietTrue, c.Type):
			case seen && was.Status != metav1.ConditionTrue && slices.Contains(p.Progress, was.Reason):
				rec.Eventf(obj, corev1.EventTypeNormal, c.Type, "%s is True (%s)", c.Type, c.Reason)
			case seen && was.Status != metav1.ConditionTrue:
				rec.Eventf(obj, corev1.EventTypeNormal, c.Type, "%s is True again (was %s)", c.Type, was.Status)
			case !seen && p.FirstTrue:
				rec.Eventf(obj, corev1.EventTypeNormal, c.Type, "%s is True (%s)", c.Type, c.Reason)
			}
		}
	}
}

// Or returns rec, or a recorder that drops every Event when rec is nil (a reconciler built without a
// manager, as unit tests build them).
func Or(rec record.EventRecorder) record.EventRecorder {
	if rec == nil {
		return discard
	}
	return rec
}

// discard drops Events (a FakeRecorder without a channel).
var discard record.EventRecorder = &record.FakeRecorder{}
