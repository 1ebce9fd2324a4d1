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

// Fixed is a field of spec S that cannot change once set on an object.
type Fixed[S any] struct {
	// Path is the field's path below spec.
	Path string
	// Get reads the field (or the fields that change together).
	Get func(s *S) any
	// Message says what to do instead.
	Message string
}

// MachineSpec describes the spec S of an infrastructure machine kind for InfrastructureMachine and
// InfrastructureMachineTemplate.
type MachineSpec[S any] struct {
	// Validate checks a spec at path p (a machine's spec, a template's spec.template.spec).
	Validate func(s *S, p *field.Path) field.ErrorList
	// Fixed are what a machine was given and chosen by: they cannot change under a Machine (CAPI
	// replaces Machines instead).
	Fixed []Fixed[S]
	// ProviderID returns spec.providerID, immutable once set.
	ProviderID func(s *S) string
}

// InfrastructureMachine returns the webhook of an infrastructure machine kind T whose spec is spec(m):
// the spec is valid, its fixed fields do not change, providerID is set once.
func InfrastructureMachine[T client.Object, S any](kind schema.GroupKind, spec func(T) *S, m MachineSpec[S]) *Validator[T] {
	p := field.NewPath("spec")
	return &Validator[T]{
		Kind:     kind,
		Validate: func(obj T) field.ErrorList { return m.Validate(spec(obj), p) },
		Change: func(_ context.Context, old, obj T) field.ErrorList {
			var errs field.ErrorList
			for _, f := range m.Fixed {
				errs = append(errs, Unchanged(f.Get(spec(old)), f.Get(spec(obj)), p.Child(f.Path), f.Message)...)
			}
			return append(errs, SetOnce(m.ProviderID(spec(old)), m.ProviderID(spec(obj)), p.Child("providerID"))...)
		},
	}
}

// InfrastructureMachineTemplate returns the webhook of the template kind T of an infrastructure machine
// whose spec.template.spec is spec(t): the spec is valid, the template immutable.
func InfrastructureMachineTemplate[T client.Object, S any](kind schema.GroupKind, spec func(T) *S, m MachineSpec[S]) *Validator[T] {
	return Template(kind, func(t T) any { return spec(t) }, func(t T) field.ErrorList {
		return m.Validate(spec(t), field.NewPath("spec", "template", "spec"))
	}, "create a new template and point the MachineDeployment at it")
}
