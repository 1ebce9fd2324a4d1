package yondercontrolplane

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
)

// Initialization and the version are recorded when they change, and only then: an attached cluster
// upgraded by its own tooling shows up as VersionChanged.
func TestStatusEventsTellOnlyChanges(t *testing.T) {
	for _, tc := range []struct {
		name        string
		before      observed
		initialized bool
		version     string
		want        []string
	}{
		{"first probe", observed{}, true, "v1.36.3", []string{
			"Normal ControlPlaneInitialized Attached control plane at 10.0.0.1:6443 is initialized (Kubernetes v1.36.3)",
			"Normal VersionObserved The attached API server runs Kubernetes v1.36.3",
		}},
		{"unchanged", observed{initialized: true, version: "v1.36.3"}, true, "v1.36.3", nil},
		{"upgraded", observed{initialized: true, version: "v1.36.3"}, true, "v1.37.0", []string{
			"Normal VersionChanged The attached API server now runs Kubernetes v1.37.0 (was v1.36.3)",
		}},
		{"unreachable before the first answer", observed{}, false, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cp := &controlplanev1.YonderControlPlane{}
			cp.Spec.ControlPlaneEndpoint.Host, cp.Spec.ControlPlaneEndpoint.Port = "10.0.0.1", 6443
			if tc.initialized {
				cp.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
			}
			cp.Status.Version = tc.version
			rec := record.NewFakeRecorder(10)
			recordStatusEvents(rec, cp, tc.before)
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				got = append(got, e)
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
