package webhooks

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/topology"
)

// TemplateImmutable forbids any change of a template's spec.template.spec (old and cur), so Machines
// created from one template stay alike; roll out a new template instead, as hint tells the operator.
// ClusterClass's topology controller may change templates in dry-run requests, which never reach etcd.
// Outside an admission request (a direct call) the check always applies.
func TemplateImmutable(ctx context.Context, obj client.Object, old, cur any, hint string) field.ErrorList {
	if req, err := admission.RequestFromContext(ctx); err == nil && topology.IsDryRunRequest(req, obj) {
		return nil
	}
	if Same(old, cur) {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec", "template", "spec"), "is immutable: "+hint)}
}

// HostSelector checks that sel is a valid label selector.
func HostSelector(sel *metav1.LabelSelector, p *field.Path) field.ErrorList {
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return field.ErrorList{field.Invalid(p, sel, "not a valid label selector: "+err.Error())}
	}
	return nil
}

// LocalSecret checks that a Secret reference's namespace, when set, is the object's own namespace:
// Secrets are only ever read from there.
func LocalSecret(refNamespace, objNamespace string, p *field.Path) field.ErrorList {
	if refNamespace != "" && refNamespace != objNamespace {
		return field.ErrorList{field.Forbidden(p, "the Secret must be in the object's namespace "+objNamespace)}
	}
	return nil
}

// SetOnce forbids changing a string field once it is set (e.g. spec.providerID).
func SetOnce(old, cur string, p *field.Path) field.ErrorList {
	if old != "" && old != cur {
		return field.ErrorList{field.Forbidden(p, "is immutable once set")}
	}
	return nil
}

// EndpointSetOnce forbids changing a control plane endpoint once it is set: CAPI copies it into the
// Cluster, which does not follow later changes.
func EndpointSetOnce(old, cur clusterv1.APIEndpoint, p *field.Path) field.ErrorList {
	if old.IsValid() && old != cur {
		return field.ErrorList{field.Forbidden(p, "is immutable once set")}
	}
	return nil
}

// Unchanged forbids any change of a value (e.g. spec.hostSelector) with msg.
func Unchanged(old, cur any, p *field.Path, msg string) field.ErrorList {
	if !Same(old, cur) {
		return field.ErrorList{field.Forbidden(p, msg)}
	}
	return nil
}

// InfrastructureCluster returns the webhook of an infrastructure cluster kind T (YonderSSHCluster,
// YonderMetalCluster): its spec.hostSelector parses, its spec.controlPlaneEndpoint is immutable once set.
func InfrastructureCluster[T client.Object](kind schema.GroupKind, selector func(T) *metav1.LabelSelector, endpoint func(T) clusterv1.APIEndpoint) *Validator[T] {
	spec := field.NewPath("spec")
	return &Validator[T]{
		Kind:     kind,
		Validate: func(c T) field.ErrorList { return HostSelector(selector(c), spec.Child("hostSelector")) },
		Change: func(_ context.Context, old, c T) field.ErrorList {
			return EndpointSetOnce(endpoint(old), endpoint(c), spec.Child("controlPlaneEndpoint"))
		},
	}
}
