package claim

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
			w := &writtenVersions{}
			for _, rv := range c.written {
				w.record(at("m", rv))
			}
			g.Expect(w.stale(at("m", c.cached))).To(Equal(c.stale))
			g.Expect(w.stale(at("other", "1"))).To(BeFalse(), "another machine")
		})
	}
}

// A machine that is gone is forgotten: a new one of the same name starts afresh.
func TestWrittenVersionsForget(t *testing.T) {
	g := NewWithT(t)
	w := &writtenVersions{}
	w.record(at("m", "9"))
	g.Expect(w.stale(at("m", "3"))).To(BeTrue())
	w.forget(client.ObjectKey{Namespace: "ns", Name: "m"})
	g.Expect(w.stale(at("m", "3"))).To(BeFalse())
}
