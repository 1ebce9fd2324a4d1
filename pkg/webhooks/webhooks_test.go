package webhooks

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

var kind = schema.GroupKind{Group: "example.test", Kind: "Thing"}

func cm(value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"}, Data: map[string]string{"v": value}}
}

// A template spec may not change, except in ClusterClass dry-run requests; object validation applies
// on create and update; every deletion is allowed.
func TestTemplateValidator(t *testing.T) {
	g := NewWithT(t)
	v := Template(kind, func(c *corev1.ConfigMap) any { return c.Data }, func(c *corev1.ConfigMap) field.ErrorList {
		if c.Data["v"] == "" {
			return field.ErrorList{field.Required(field.NewPath("data", "v"), "set it")}
		}
		return nil
	}, "create a new one")
	_, err := v.ValidateCreate(context.Background(), cm(""))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue())
	g.Expect(err).To(MatchError(ContainSubstring("data.v: Required value: set it")))
	_, err = v.ValidateUpdate(context.Background(), cm("a"), cm("b"))
	g.Expect(err).To(MatchError(ContainSubstring("spec.template.spec: Forbidden: is immutable: create a new one")))
	_, err = v.ValidateUpdate(context.Background(), cm("a"), cm("a"))
	g.Expect(err).NotTo(HaveOccurred())
	dry := cm("b")
	dry.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{DryRun: ptr.To(true)}})
	_, err = v.ValidateUpdate(ctx, cm("a"), dry)
	g.Expect(err).NotTo(HaveOccurred(), "ClusterClass dry-runs may change templates")
	_, err = v.ValidateDelete(context.Background(), cm(""))
	g.Expect(err).NotTo(HaveOccurred())
}

func TestSharedChecks(t *testing.T) {
	g := NewWithT(t)
	p := field.NewPath("spec", "x")
	g.Expect(HostSelector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}, p)).To(HaveLen(1))
	g.Expect(HostSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}, p)).To(BeEmpty())
	g.Expect(LocalSecret("other", "ns", p).ToAggregate()).To(MatchError(ContainSubstring("must be in the object's namespace ns")))
	g.Expect(LocalSecret("", "ns", p)).To(BeEmpty())
	g.Expect(SetOnce("", "a", p)).To(BeEmpty())
	g.Expect(SetOnce("a", "b", p)).To(HaveLen(1))
	ep := clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}
	g.Expect(EndpointSetOnce(clusterv1.APIEndpoint{}, ep, p)).To(BeEmpty())
	g.Expect(EndpointSetOnce(ep, clusterv1.APIEndpoint{Host: "10.0.0.2", Port: 6443}, p)).To(HaveLen(1))
	g.Expect(Unchanged([]int{1}, []int{2}, p, "is immutable")).To(HaveLen(1))
	g.Expect(Invalid(kind, "t", nil)).To(Succeed())
}

// A Validator with defaults is registered as a defaulting webhook too.
func TestDefaulting(t *testing.T) {
	g := NewWithT(t)
	d := WithDefaults(&Validator[*corev1.ConfigMap]{Kind: kind, Defaults: func(c *corev1.ConfigMap) { c.Data = map[string]string{"v": "default"} }})
	var _ admission.Defaulter[*corev1.ConfigMap] = d
	var _ admission.Validator[*corev1.ConfigMap] = d
	c := &corev1.ConfigMap{}
	g.Expect(d.Default(context.Background(), c)).To(Succeed())
	g.Expect(c.Data).To(HaveKeyWithValue("v", "default"))
}
