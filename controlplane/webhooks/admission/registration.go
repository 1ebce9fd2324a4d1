// Package admission holds the defaulting and validating webhooks of YonderControlPlane and
// YonderControlPlaneTemplate. Every kind is a pkg/webhooks Validator; Webhooks lists their registrations.
package admission

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// Webhooks returns the registrations of every webhook of the provider.
func Webhooks() []webhooks.Registration {
	return []webhooks.Registration{
		webhooks.For(&controlplanev1.YonderControlPlane{}, YonderControlPlane()),
		webhooks.For(&controlplanev1.YonderControlPlaneTemplate{}, YonderControlPlaneTemplate()),
	}
}

func kind(k string) schema.GroupKind { return controlplanev1.GroupVersion.WithKind(k).GroupKind() }
