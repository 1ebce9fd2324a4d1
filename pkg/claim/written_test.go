package claim

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func at(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

// A cached machine counts as stale only when it is older than this replica's own last write of it.
func TestWrittenVersionsStale(t *testing.T) {
	for _, c := range []struct {
		name    string
		written []string // versions recorded, in order
		cached  string
		stale   bool
	}{
		{name: "nothing written", cached: "5", stale: false},
		{name: "cache shows the write", written: []string{"9"}, cached: "9", stale: false},
		{name: "cache behind the write", written: []string{"9"}, cached: "8", stale: true},
		{name: "cache behind by a digit", written: []string{"10"}, cached: "9", stale: true},
		{name: "another writer wrote since", written: []string{"9"}, cached: "12", stale: false},
		{name: "an older write recorded late keeps the newer", written: []string{"9", "7"}, cached: "8", stale: true},
		{name: "versions that do not compare never count as stale", written: []string{"abc"}, cached: "8", stale: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			w := &WrittenVersions{}
			for _, rv := range c.written {
				w.Record(at("m", rv))
			}
			g.Expect(w.Stale(at("m", c.cached))).To(Equal(c.stale))
			g.Expect(w.Stale(at("other", "1"))).To(BeFalse(), "another machine")
		})
	}
}

// A machine that is gone is forgotten: a new one of the same name starts afresh.
func TestWrittenVersionsForget(t *testing.T) {
	g := NewWithT(t)
	w := &WrittenVersions{}
	w.Record(at("m", "9"))
	g.Expect(w.Stale(at("m", "3"))).To(BeTrue())
	w.Forget(client.ObjectKey{Namespace: "ns", Name: "m"})
	g.Expect(w.Stale(at("m", "3"))).To(BeFalse())
}

// RecordingClient records the objects it patches, spec or status, that Only accepts, and nothing of a
// write that failed.
func TestRecordingClientRecordsWhatOnlyAccepts(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	cm, secret := at("m", ""), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}
	c := fake.NewClientBuilder().WithObjects(cm, secret).WithStatusSubresource(cm).Build()
	w := &WrittenVersions{}
	rc := RecordingClient{Client: c, Written: w, Only: func(o client.Object) bool { _, ok := o.(*corev1.ConfigMap); return ok }}

	before := cm.DeepCopy()
	cm.Data = map[string]string{"k": "v"}
	g.Expect(rc.Patch(ctx, cm, client.MergeFrom(before))).To(Succeed())
	g.Expect(w.Stale(at("m", before.ResourceVersion))).To(BeTrue(), "the patch was recorded")
	g.Expect(w.Stale(at("m", cm.ResourceVersion))).To(BeFalse())

	sb := secret.DeepCopy()
	secret.StringData = map[string]string{"k": "v"}
	g.Expect(rc.Patch(ctx, secret, client.MergeFrom(sb))).To(Succeed())
	g.Expect(w.Stale(at("m", cm.ResourceVersion))).To(BeFalse(), "a Secret of the same name is not recorded")

	before = cm.DeepCopy()
	cm.Labels = map[string]string{"a": "b"}
	g.Expect(rc.Status().Patch(ctx, cm, client.MergeFrom(before))).To(Succeed())
	g.Expect(w.Stale(at("m", before.ResourceVersion))).To(BeTrue(), "the status patch was recorded")

	gone := at("gone", "")
	g.Expect(rc.Patch(ctx, gone, client.RawPatch("application/merge-patch+json", []byte(`{}`)))).NotTo(Succeed())
	g.Expect(w.Stale(at("gone", "1"))).To(BeFalse(), "a failed write records nothing")
}
