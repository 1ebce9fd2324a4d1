package lab

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/stack"
)

// The check pods against a real apiserver (one per package: CAPI's informers refuse a second in one
// process), with a Ready Node n-ready and a NotReady Node n-notready (there is no kubelet).
func TestCheckPodsOnARealAPIServer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, err := envtest.Start(ctx, envtest.Options{WithoutCAPIControllers: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(env.Config, client.Options{Scheme: cli.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	for name, ready := range map[string]corev1.ConditionStatus{"n-ready": corev1.ConditionTrue, "n-notready": corev1.ConditionFalse} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		g.Expect(c.Create(ctx, n)).To(Succeed())
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		g.Expect(c.Status().Update(ctx, n)).To(Succeed())
	}
	// Each subtest leaves no pod behind.
	t.Run("replaceCheckPod frees the name of one that cannot stay", func(t *testing.T) { replaceFreesTheName(t, c) })
	t.Run("status shows them live and says when the record is stale", func(t *testing.T) { statusShowsThemLive(t, c) })
}

// `lab status` reads the check pods and their Nodes now: a pod whose Node is Ready is fine; one whose Node
// is not Ready, one whose Node is gone and one that is missing make the recorded result stale, each named;
// a failed check shows as failed with its error.
func statusShowsThemLive(t *testing.T, c client.Client) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	pod := func(site, node, ip string) {
		p := stack.AnswerPod("lab-net-"+site, node, "hello", map[string]string{"app.kubernetes.io/name": checkPodApp, SiteLabel: site})
		g.Expect(c.Create(ctx, p)).To(Succeed())
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
		g.Expect(c.Status().Update(ctx, p)).To(Succeed())
	}
	pod("site-a", "n-ready", "10.244.0.2")
	pod("site-b", "n-notready", "10.244.1.2")
	pod("site-c", "n-gone", "10.244.2.2")

	at := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	now := func() time.Time { return at.Add(2 * time.Minute) }
	st := &State{Cluster: ClusterName, Ready: at, PodCheck: &PodCheck{
		Lines:  []string{`lab-net-site-a (site-a) -> 10.244.1.2:8080 (site-b) TCP: "hello from lab-net-site-b at site-b" [Direct]`},
		Pods:   map[string]string{"site-a": "lab-net-site-a", "site-b": "lab-net-site-b", "site-c": "lab-net-site-c", "site-d": "lab-net-site-d"},
		Nodes:  map[string]string{"site-a": "n-ready", "site-b": "n-notready", "site-c": "n-gone", "site-d": "n-d"},
		At:     at,
		Source: SourceUp,
	}}
	show := func() string {
		nodes := &corev1.NodeList{}
		g.Expect(c.List(ctx, nodes)).To(Succeed())
		var out bytes.Buffer
		g.Expect(printPodCheck(ctx, c, st, nodes.Items, now, &out)).To(Succeed())
		return out.String()
	}
	out := show()
	g.Expect(out).To(MatchRegexp(`lab-net-site-a\s+site-a\s+n-ready\s+Running\s+10\.244\.0\.2\s+Ready\n`))
	g.Expect(out).To(MatchRegexp(`lab-net-site-b\s+site-b\s+n-notready\s+Running\s+10\.244\.1\.2\s+NotReady\n`))
	g.Expect(out).To(MatchRegexp(`lab-net-site-c\s+site-c\s+n-gone\s+Running\s+10\.244\.2\.2\s+gone\n`))
	g.Expect(out).To(MatchRegexp(`lab-net-site-d\s+site-d\s+n-d\s+missing\s+-\s+-\n`))
	g.Expect(out).To(ContainSubstring("Pod check: passed at " + at.Local().Format(time.RFC3339) + " (lab up, 2m0s ago)\n  " + st.PodCheck.Lines[0] + "\n"))
	g.Expect(out).To(ContainSubstring("The stored result is stale (lab-net-site-b's Node n-notready is not Ready; lab-net-site-c's Node n-gone is gone; lab-net-site-d is missing): run `kubectl yonder lab check`\n"))

	// After a check on the Nodes there are now: only the pod on the Ready Node, the record from lab check.
	for _, s := range []string{"site-b", "site-c"} {
		g.Expect(c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lab-net-" + s}}, client.GracePeriodSeconds(0))).To(Succeed())
	}
	g.Eventually(func() []corev1.Pod {
		pods := &corev1.PodList{}
		g.Expect(c.List(ctx, pods, client.InNamespace("default"))).To(Succeed())
		return pods.Items
	}).WithTimeout(time.Minute).Should(HaveLen(1))
	st.PodCheck = &PodCheck{Pods: map[string]string{"site-a": "lab-net-site-a"}, Nodes: map[string]string{"site-a": "n-ready"}, At: at, Source: SourceCheck}
	out = show()
	g.Expect(out).To(ContainSubstring("Pod check: passed at " + at.Local().Format(time.RFC3339) + " (lab check, 2m0s ago)\n"))
	g.Expect(out).NotTo(ContainSubstring("stale"))

	// A pod that moved to another Node than the check used; a failed check.
	st.PodCheck = &PodCheck{Pods: map[string]string{"site-a": "lab-net-site-a"}, Nodes: map[string]string{"site-a": "n-other"}, At: at, Source: SourceCheck,
		Error: "pod-to-pod check failed: lab-net-site-a got no answer"}
	out = show()
	g.Expect(out).To(ContainSubstring("Pod check: failed at " + at.Local().Format(time.RFC3339) + " (lab check, 2m0s ago)\n  failed: pod-to-pod check failed: lab-net-site-a got no answer\n"))
	g.Expect(out).To(ContainSubstring("The stored result is stale (lab-net-site-a runs on n-ready, the check used n-other): run `kubectl yonder lab check`"))

	// A check pod that does not run is reported with its Warning events (where the CNI's error is).
	g.Expect(c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lab-net-site-a.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "lab-net-site-a"}, Type: corev1.EventTypeWarning,
		Reason: "FailedCreatePodSandBox", Message: `plugin type="bridge" failed (add): failed to set bridge addr`, Count: 3})).To(Succeed())
	g.Expect(warnings(ctx, c, "lab-net-site-a")).To(Equal(`; Warning events: FailedCreatePodSandBox: plugin type="bridge" failed (add): failed to set bridge addr (x3)`))
	g.Expect(warnings(ctx, c, "lab-net-site-b")).To(Equal("; no Warning events"))

	// No record yet on a ready lab with a Cluster.
	st.PodCheck = nil
	g.Expect(show()).To(MatchRegexp(regexp.QuoteMeta("Pod check: none recorded; `kubectl yonder lab check` runs it")))
}

// A check pod that cannot stay is deleted — at once when no kubelet can confirm its end (its Node gone or
// not Ready) — and waited for until gone (no kubelet here: a graceful deletion of a running pod would never
// end, so a pass shows which deletion each case got).
func replaceFreesTheName(t *testing.T, c client.Client) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	for _, tc := range []struct {
		site, node string
		phase      corev1.PodPhase
		want       string
	}{
		{"site-a", "n-gone", corev1.PodRunning, "pod check: replacing lab-net-site-a (its Node n-gone is gone) with one on n-new"},
		{"site-b", "n-notready", corev1.PodRunning, "pod check: replacing lab-net-site-b (its Node n-notready is not Ready) with one on n-new"},
		{"site-c", "n-ready", corev1.PodFailed, "pod check: replacing lab-net-site-c (it ended (Failed)) with one on n-new"},
	} {
		p := stack.AnswerPod("lab-net-"+tc.site, tc.node, "hello", map[string]string{"app.kubernetes.io/name": checkPodApp, SiteLabel: tc.site})
		g.Expect(c.Create(ctx, p)).To(Succeed())
		p.Status = corev1.PodStatus{Phase: tc.phase}
		g.Expect(c.Status().Update(ctx, p)).To(Succeed())
		var steps []string
		step := func(format string, args ...any) { steps = append(steps, fmt.Sprintf(format, args...)) }
		g.Expect(replaceCheckPod(ctx, c, p, "n-new", time.Minute, step)).To(Succeed())
		g.Expect(steps).To(Equal([]string{tc.want}))
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}))).To(BeTrue(), "%s is gone", p.Name)
	}
}
