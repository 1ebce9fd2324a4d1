package metalmachine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostpool"
	"github.com/yonder-dev/yonder/test/harness"
)

// Issue 19: a YonderMetalMachine cannot take another machine's claim identity. Created with the identity
// of a claim that a BareMetalHost records for another machine (or a made-up one), given one on update
// that is not its own UID, or changing or dropping a recorded one — each is refused by the webhook, with
// the annotation named. The legitimate writers pass: clusterctl move creating the machine with the
// identity its host records for it under its own name, clusterctl move's delete-for-move patch of the
// source (which drops every annotation), and the controller recording the machine's own UID.
func TestClaimIdentityIsNotUserWritable(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "claimid").Name
	registerHosts(g, ns, hostSpec{Name: "victims-host", Consumer: &corev1.ObjectReference{
		APIVersion: infrav1.GroupVersion.String(), Kind: hostpool.ConsumerKind, Namespace: ns, Name: "victim", UID: "victim-uid"}})
	machine := func(name, id string) *infrav1.YonderMetalMachine {
		m := &infrav1.YonderMetalMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: infrav1.YonderMetalMachineSpec{Image: testImage()}}
		if id != "" {
			m.Annotations = map[string]string{infrav1.ClaimIDAnnotation: id}
		}
		return m
	}
	harness.ExpectClaimIdentityNotUserWritable(ctx, g, env, harness.ClaimIdentityCase{
		Namespace: ns, HostKind: "BareMetalHost", Annotation: infrav1.ClaimIDAnnotation,
		Machine: func(name, id string) client.Object { return machine(name, id) },
	})
}
