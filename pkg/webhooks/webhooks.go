// Package webhooks is how every Yonder manager registers and writes its admission webhooks: one
// registration (For, Setup), one validator shape (Validator: the checks of an object, and of a change on
// update), one answer for rejected objects (an Invalid error with every field error), and the checks
// several kinds share: template immutability (except ClusterClass dry-runs), host selectors that parse,
// secret references that stay in the object's namespace, fields that are immutable once set, and an
// infrastructure machine's claim identity (ClaimIdentity).
package webhooks

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Registration registers one kind's webhooks with a manager.
type Registration func(mgr ctrl.Manager) error

// For returns the registration of v as the validating webhook of obj's kind, and as its defaulting
// webhook when v also implements admission.Defaulter.
func For[T client.Object](obj T, v admission.Validator[T]) Registration {
	return func(mgr ctrl.Manager) error {
		b := ctrl.NewWebhookManagedBy(mgr, obj).WithValidator(v)
		if d, ok := v.(admission.Defaulter[T]); ok {
			b = b.WithDefaulter(d)
		}
		if err := b.Complete(); err != nil {
			return fmt.Errorf("failed to set up the webhooks of %T: %w", obj, err)
		}
		return nil
	}
}

// Setup registers every registration with mgr.
func Setup(mgr ctrl.Manager, regs ...Registration) error {
	for _, r := range regs {
		if err := r(mgr); err != nil {
			return err
		}
	}
	return nil
}

// Validator is the validating (and, with Default set, defaulting) webhook of one kind T: Validate
// checks an object on create and on update, Change the difference on update (immutable fields).
type Validator[T client.Object] struct {
	// Kind is T's group and kind, for the Invalid error.
	Kind schema.GroupKind
	// Validate checks an object; nil accepts every object.
	Validate func(obj T) field.ErrorList
	// Change checks an update from old to obj beyond Validate; nil accepts every change.
	Change func(ctx context.Context, old, obj T) field.ErrorList
	// Create checks a created object beyond Validate against what the API holds (e.g. the hosts a
	// claim identity must match); nil accepts every object.
	Create func(ctx context.Context, obj T) field.ErrorList
	// Defaults fills defaults (registered as a defaulting webhook through WithDefaults).
	Defaults func(obj T)
}

// ValidateCreate implements admission.Validator.
func (v *Validator[T]) ValidateCreate(ctx context.Context, obj T) (admission.Warnings, error) {
	errs := v.validate(obj)
	if v.Create != nil {
		errs = append(errs, v.Create(ctx, obj)...)
	}
	return nil, Invalid(v.Kind, obj.GetName(), errs)
}

// ValidateUpdate implements admission.Validator.
func (v *Validator[T]) ValidateUpdate(ctx context.Context, old, obj T) (admission.Warnings, error) {
	errs := v.validate(obj)
	if v.Change != nil {
		errs = append(errs, v.Change(ctx, old, obj)...)
	}
	return nil, Invalid(v.Kind, obj.GetName(), errs)
}

// ValidateDelete implements admission.Validator: every deletion is allowed.
func (v *Validator[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}

func (v *Validator[T]) validate(obj T) field.ErrorList {
	if v.Validate == nil {
		return nil
	}
	return v.Validate(obj)
}

// Defaulting is a Validator that also defaults; For registers both webhooks for it.
type Defaulting[T client.Object] struct {
	*Validator[T]
}

// Default implements admission.Defaulter.
func (d Defaulting[T]) Default(_ context.Context, obj T) error {
	if d.Defaults != nil {
		d.Defaults(obj)
	}
	return nil
}

// WithDefaults returns v as a defaulting and validating webhook (v.Defaults must be set).
func WithDefaults[T client.Object](v *Validator[T]) Defaulting[T] { return Defaulting[T]{Validator: v} }

// Invalid returns the API error that rejects object name of kind gk for errs, or nil when errs is
// empty.
func Invalid(gk schema.GroupKind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(gk, name, errs)
}

// Same reports whether two values (specs, selectors) are deeply equal.
func Same(a, b any) bool { return reflect.DeepEqual(a, b) }

// Template returns the webhook of a template kind T: validate checks the object (nil: nothing), and the
// template spec (spec(t), its spec.template.spec) is immutable (TemplateImmutable, with hint).
func Template[T client.Object](kind schema.GroupKind, spec func(T) any, validate func(T) field.ErrorList, hint string) *Validator[T] {
	return &Validator[T]{
		Kind:     kind,
		Validate: validate,
		Change: func(ctx context.Context, old, t T) field.ErrorList {
			return TemplateImmutable(ctx, t, spec(old), spec(t), hint)
		},
	}
}
