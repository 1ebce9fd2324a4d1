// Package admission holds the defaulting and validating webhooks of YonderConfig and
// YonderConfigTemplate. Every kind is a pkg/webhooks Validator; Webhooks lists their registrations.
package admission

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// Webhooks returns the registrations of every webhook of the provider.
func Webhooks() []webhooks.Registration {
	return []webhooks.Registration{
		webhooks.For(&bootstrapv1.YonderConfig{}, YonderConfig()),
		webhooks.For(&bootstrapv1.YonderConfigTemplate{}, YonderConfigTemplate()),
	}
}

func kind(k string) schema.GroupKind { return bootstrapv1.GroupVersion.WithKind(k).GroupKind() }
