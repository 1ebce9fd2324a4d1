package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/stack"
)

// checkPod is one of the pod check's pods: a busybox httpd answering with a text naming the pod and its site,
// behind a ClusterIP Service of the same name (serviceIP).
type checkPod struct {
	name, site, node, ip, serviceIP string
}

// answer is what the pod's HTTP server returns; the check asserts it arrived verbatim at the other site.
func (p checkPod) answer() string { return "hello from " + p.name + " at " + p.site }

// PodCheck is the outcome of the cross-site pod-to-pod check, as lab.json records it.
type PodCheck struct {
	// Lines are the exchanges that passed, in order, e.g. `lab-net-site-a (site-a) -> 10.244.1.5:8080 (site-b) TCP: "hello from lab-net-site-b at site-b" [Direct]`.
	Lines []string `json:"lines,omitempty"`
	// Pods are the check pods (namespace default) by site; they stay for the operator to exec into.
	Pods map[string]string `json:"pods,omitempty"`
	// IPs are the check pods' addresses by site.
	IPs map[string]string `json:"ips,omitempty"`
	// ServiceIPs are the ClusterIPs of the check pods' Services (named as the pods) by site.
	ServiceIPs map[string]string `json:"serviceIPs,omitempty"`
	// Nodes are the Nodes the check pods ran on, by site.
	Nodes map[string]string `json:"nodes,omitempty"`
	// At is when the check ended; Source is the command that ran it (SourceUp or SourceCheck).
	At     time.Time `json:"at"`
	Source string    `json:"source"`
	// Error is why the check failed; empty when it passed.
	Error string `json:"error,omitempty"`
}

// The commands that run the pod check, as PodCheck.Source names them.
const (
	SourceUp    = "lab up"
	SourceCheck = "lab check"
)

// The app.kubernetes.io/name labels of the check pods and of their client pods.
const (
	checkPodApp  = "lab-net-check"
	clientPodApp = "lab-net-check-client"
)

// printPodNext prints how to repeat the pod check's exchanges by hand.
func printPodNext(out io.Writer, st *State) {
	if st.PodCheck == nil || len(st.PodCheck.Pods) < 2 {
		return
	}
	a, b := st.PodCheck.Pods["site-a"], st.PodCheck.Pods["site-b"]
	ipA, ipB, svcA := st.PodCheck.IPs["site-a"], st.PodCheck.IPs["site-b"], st.PodCheck.ServiceIPs["site-a"]
	_, _ = fmt.Fprintf(out, `Pods across sites (the pod check's: %[2]s at site-a %[4]s, %[3]s at site-b %[5]s; namespace default):
  export KUBECONFIG=%[1]s
  kubectl get sites,gatewaypools,sitepeerings,nodenetworks          # the network add-on's view
  kubectl -n yonder-network get pods -o wide
  kubectl exec %[2]s -- ping -c 3 %[5]s
  kubectl exec %[3]s -- sh -c 'printf "GET / HTTP/1.0\r\n\r\n" | nc -w 3 %[4]s %[6]s'
  kubectl exec %[3]s -- sh -c 'printf "GET / HTTP/1.0\r\n\r\n" | nc -w 3 %[7]s %[6]s'   # through Service %[2]s (kube-proxy)
  kubectl exec -it %[2]s -- sh
  kubectl -n yonder-network exec <yonder-net-node pod> -- /yonder-net-node debug   # WireGuard peers, routes, eBPF counters

`, st.WorkloadKubeconfig, a, b, ipA, ipB, stack.AnswerPort, svcA)
}

// podCheck places a busybox pod on one Node of every site (nodes: Node → site), each serving its answer
// over HTTP, then, for one pair of sites per kind of link (Direct between two reachable sites,
// NAT-initiated between a reachable and a NATed one, Relayed between two NATed ones), fetches each pod's
// answer from the other with nc (TCP through the tunnels, both directions) and pings it (ICMP). Each
// direction runs in a client pod on the sender's Node, every direction at once; the lab reads its log. A check pod left from an
// earlier check stays where it is while its Node is still one of its site's; one whose Node is gone, not
// Ready or at another site is replaced by one on the first Node of its site (by name). The result holds
// what passed so far, also when the check fails.
func podCheck(ctx context.Context, c client.Client, cfg *rest.Config, nodes map[string]string, natSites map[string]bool, timeout time.Duration, step func(string, ...any)) (*PodCheck, error) {
	res := &PodCheck{Pods: map[string]string{}, IPs: map[string]string{}, ServiceIPs: map[string]string{}, Nodes: map[string]string{}}
	bySite := map[string][]string{}
	for n, st := range nodes {
		bySite[st] = append(bySite[st], n)
	}
	sites := make([]string, 0, len(bySite))
	for st := range bySite {
		slices.Sort(bySite[st])
		sites = append(sites, st)
	}
	slices.Sort(sites)
	if len(sites) < 2 {
		return res, fmt.Errorf("%w (Nodes by site: %v)", errNoSiteNodes, nodes)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, fmt.Errorf("failed to create the workload clientset: %w", err)
	}
	t0 := time.Now()
	pods, err := startCheckPods(ctx, c, sites, bySite, timeout, step)
	if err != nil {
		return res, err
	}
	var running []string
	for _, st := range sites {
		p := pods[st]
		res.Pods[st], res.IPs[st], res.ServiceIPs[st], res.Nodes[st] = p.name, p.ip, p.serviceIP, p.node
		running = append(running, fmt.Sprintf("%s on %s (%s, %s, Service %s)", p.name, p.node, p.site, p.ip, p.serviceIP))
	}
	step("pod check: %s running (%.1fs)", strings.Join(running, ", "), time.Since(t0).Seconds())
	kinds, err := linkKinds(ctx, cfg)
	if err != nil {
		return res, err
	}
	// Client pods left by an interrupted check (on a Node that may be gone since) would block their names.
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("default"), client.MatchingLabels{"app.kubernetes.io/name": clientPodApp}, client.GracePeriodSeconds(0)); err != nil {
		return res, fmt.Errorf("failed to delete the pod check's old client pods: %w", err)
	}
	// Every direction at once: each starts a client pod (seconds), and the directions share nothing but
	// the check pods they talk to. Their lines are printed as they finish and recorded in pair order.
	type direction struct {
		from, to *checkPod
		kind     string
		lines    []string
		err      error
	}
	var dirs []*direction
	for _, pair := range checkPairs(sites, natSites) {
		kind := kinds[pairKey(pair[0], pair[1])]
		dirs = append(dirs, &direction{from: pods[pair[0]], to: pods[pair[1]], kind: kind}, &direction{from: pods[pair[1]], to: pods[pair[0]], kind: kind})
	}
	var mu sync.Mutex
	lockedStep := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		step(format, args...)
	}
	var wg sync.WaitGroup
	for _, d := range dirs {
		wg.Go(func() { d.lines, d.err = exchange(ctx, c, cs, d.from, d.to, d.kind, timeout, lockedStep) })
	}
	wg.Wait()
	var errs []error
	for _, d := range dirs {
		if d.err != nil {
			errs = append(errs, d.err)
			continue
		}
		res.Lines = append(res.Lines, d.lines...)
	}
	if len(errs) > 0 {
		return res, errors.Join(errs...)
	}
	step("pod check passed in %.1fs", time.Since(t0).Seconds())
	return res, nil
}

// startCheckPods starts a check pod at every site (candidates: the site's Nodes, sorted), replacing one
// that cannot stay where it is, and waits until each runs with an address.
func startCheckPods(ctx context.Context, c client.Client, sites []string, candidates map[string][]string, timeout time.Duration, step func(string, ...any)) (map[string]*checkPod, error) {
	pods := map[string]*checkPod{}
	for _, st := range sites {
		p := &checkPod{name: "lab-net-" + st, site: st, node: candidates[st][0]}
		old := &corev1.Pod{}
		err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: p.name}, old)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("failed to get the check pod %s: %w", p.name, err)
		case old.DeletionTimestamp == nil && old.Status.Phase != corev1.PodFailed && old.Status.Phase != corev1.PodSucceeded &&
			slices.Contains(candidates[st], old.Spec.NodeName):
			p.node = old.Spec.NodeName // still on a Node of its site: keep it
		default:
			if err := replaceCheckPod(ctx, c, old, p.node, timeout, step); err != nil {
				return nil, err
			}
		}
		if err := startCheckPod(ctx, c, p); err != nil {
			return nil, err
		}
		if err := ensureCheckService(ctx, c, p); err != nil {
			return nil, err
		}
		pods[st] = p
	}
	for _, st := range sites {
		if err := waitPodIP(ctx, c, pods[st], timeout); err != nil {
			return nil, err
		}
	}
	return pods, nil
}

// replaceCheckPod deletes the check pod old, which cannot stay (its Node is gone, not Ready or at another
// site, or the pod ended), and waits until it is gone, so that its name is free for one on node. A pod
// whose kubelet cannot confirm its end (its Node gone or not Ready) is deleted at once.
func replaceCheckPod(ctx context.Context, c client.Client, old *corev1.Pod, node string, timeout time.Duration, step func(string, ...any)) error {
	why, force := "it ended ("+string(old.Status.Phase)+")", false
	n := &corev1.Node{}
	switch err := c.Get(ctx, client.ObjectKey{Name: old.Spec.NodeName}, n); {
	case apierrors.IsNotFound(err):
		why, force = "its Node "+old.Spec.NodeName+" is gone", true
	case err != nil:
		return fmt.Errorf("failed to get Node %s of the check pod %s: %w", old.Spec.NodeName, old.Name, err)
	case !nodeReady(n):
		why, force = "its Node "+old.Spec.NodeName+" is not Ready", true
	case old.DeletionTimestamp != nil:
		why = "it is being deleted"
	case old.Status.Phase != corev1.PodFailed && old.Status.Phase != corev1.PodSucceeded:
		why = "its Node " + old.Spec.NodeName + " is no longer at site " + old.Labels[SiteLabel]
	}
	step("pod check: replacing %s (%s) with one on %s", old.Name, why, node)
	opts := []client.DeleteOption{client.Preconditions{UID: &old.UID}}
	if force {
		opts = append(opts, client.GracePeriodSeconds(0))
	}
	if err := c.Delete(ctx, old, opts...); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("failed to delete the check pod %s: %w", old.Name, err)
	}
	err := stack.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		cur := &corev1.Pod{}
		err := c.Get(ctx, client.ObjectKeyFromObject(old), cur)
		return apierrors.IsNotFound(err) || (err == nil && cur.UID != old.UID), nil
	})
	if err != nil {
		return fmt.Errorf("the check pod %s on %s was not gone %s after its deletion: %w", old.Name, old.Spec.NodeName, timeout, err)
	}
	return nil
}

// nodeReady reports whether n's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkPairs are the pairs of sites the check exchanges between: one per kind of link the lab has —
// two reachable sites (Direct), a reachable and a NATed one (NAT-initiated), two NATed ones (Relayed) —
// or the first two sites when that gives none.
func checkPairs(sites []string, natSites map[string]bool) [][2]string {
	var open, nated []string
	for _, st := range sites {
		if natSites[st] {
			nated = append(nated, st)
		} else {
			open = append(open, st)
		}
	}
	var out [][2]string
	if len(open) >= 2 {
		out = append(out, [2]string{open[0], open[1]})
	}
	if len(open) >= 1 && len(nated) >= 1 {
		out = append(out, [2]string{open[0], nated[0]})
	}
	if len(nated) >= 2 {
		out = append(out, [2]string{nated[0], nated[1]})
	}
	if len(out) == 0 {
		out = append(out, [2]string{sites[0], sites[1]})
	}
	return out
}

func pairKey(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

// linkKinds describes every SitePeering link as status shows it: "Direct", "NATInitiated (site-c behind
// NAT)", "Relayed via site-a". It reads with the plugin's scheme (the network add-on's API), not the stack's.
func linkKinds(ctx context.Context, cfg *rest.Config) (map[[2]string]string, error) {
	c, err := client.New(cfg, client.Options{Scheme: cli.Scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to create the workload client: %w", err)
	}
	sps := &netv1.SitePeeringList{}
	if err := c.List(ctx, sps); err != nil {
		return nil, fmt.Errorf("failed to list SitePeerings for the pod check: %w", err)
	}
	out := map[[2]string]string{}
	for _, sp := range sps.Items {
		for _, l := range sp.Status.Links {
			if len(l.Sites) == 2 {
				out[pairKey(l.Sites[0], l.Sites[1])] = describeKind(l)
			}
		}
	}
	return out, nil
}

// describeKind is a link's kind with who is behind NAT or the relay.
func describeKind(l netv1.LinkStatus) string {
	switch {
	case l.Kind == netv1.LinkKindRelayed && l.Relay != "":
		return "Relayed via " + l.Relay
	case l.Kind == netv1.LinkKindNATInitiated:
		return "NATInitiated (" + strings.Join(l.BehindNAT, ",") + " behind NAT)"
	}
	return string(l.Kind)
}

// exchange runs one direction of the check — TCP (the other pod's answer) and ICMP — and returns its lines.
func exchange(ctx context.Context, c client.Client, cs kubernetes.Interface, from, to *checkPod, kind string, timeout time.Duration, step func(string, ...any)) ([]string, error) {
	received := regexp.MustCompile(`(\d+) packets transmitted, (\d+) packets received`)
	t1 := time.Now()
	out, err := runClient(ctx, c, cs, from, to, timeout)
	if err != nil {
		return nil, err
	}
	direct, throughService, _ := strings.Cut(out, "Service response:\n")
	if !answered(direct, "TCP response:\n", to.answer()) {
		return nil, fmt.Errorf("pod-to-pod check failed: %s (%s, %s) got no answer from %s:%s (%s, %s) over TCP (output %q); `kubectl yonder describe cluster %s` shows the tunnels",
			from.name, from.site, from.node, to.ip, stack.AnswerPort, to.name, to.site, out, ClusterName)
	}
	suffix := ""
	if kind != "" {
		suffix = " [" + kind + "]"
	}
	got, err := downloaded(out, from, to, to.ip)
	if err != nil {
		return nil, err
	}
	tcpLine := fmt.Sprintf("%s (%s) -> %s:%s (%s) TCP: %q, /big: %d bytes%s", from.name, from.site, to.ip, stack.AnswerPort, to.site, to.answer(), got, suffix)
	step("pod check: %s", tcpLine)
	if !answered(throughService, "", to.answer()) {
		return nil, fmt.Errorf("pod-to-Service check failed: %s (%s, %s) got no answer through Service %s %s:%s (its pod %s at %s) over TCP (output %q); the workload cluster's kube-proxy routes ClusterIPs on each Node (kubectl -n kube-system get pods -l k8s-app=kube-proxy -o wide)",
			from.name, from.site, from.node, to.name, to.serviceIP, stack.AnswerPort, to.ip, to.site, out)
	}
	if got, err = downloaded(out, from, to, to.serviceIP); err != nil {
		return nil, err
	}
	svcLine := fmt.Sprintf("%s (%s) -> Service %s %s:%s (%s) TCP: %q, /big: %d bytes%s", from.name, from.site, to.name, to.serviceIP, stack.AnswerPort, to.site, to.answer(), got, suffix)
	step("pod check: %s", svcLine)
	m := received.FindStringSubmatch(out)
	if m == nil || m[2] == "0" {
		return nil, fmt.Errorf("pod-to-pod check failed: %s (%s) pinging %s (%s): %q", from.name, from.site, to.ip, to.site, out)
	}
	icmpLine := fmt.Sprintf("%s (%s) -> %s (%s) ICMP: %s/%s echo replies%s", from.name, from.site, to.ip, to.site, m[2], m[1], suffix)
	step("pod check: %s (all in %.1fs incl. the client pod's start)", icmpLine, time.Since(t1).Seconds())
	return []string{tcpLine, svcLine, icmpLine}, nil
}

// downloaded returns how many bytes the client's download of /big from addr (to's pod address or its
// Service's) received, headers included, and fails unless that covers the whole file: a bulk transfer
// across the link, where the answer is one segment each way.
func downloaded(log string, from, to *checkPod, addr string) (int, error) {
	m := regexp.MustCompile(`(?m)^Download ` + regexp.QuoteMeta(addr) + `: *(\d+) bytes$`).FindStringSubmatch(log)
	if m == nil {
		return 0, fmt.Errorf("bulk transfer check failed: %s (%s, %s) reported no download of /big from %s (%s); output %q", from.name, from.site, from.node, addr, to.site, log)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < stack.BigFileBytes {
		return 0, fmt.Errorf("bulk transfer check failed: %s (%s, %s) received %s bytes of /big (%d) from %s (%s, %s); a transfer cut short after its handshake points at conntrack on a Node: INVALID packets, which kube-proxy's KUBE-FORWARD chain drops (docs/network-dataplane.md)",
			from.name, from.site, from.node, m[1], stack.BigFileBytes, addr, to.name, to.site)
	}
	return n, nil
}

// answered says whether the part of a client's log after marker ("" : all of it) has a line that is
// answer.
func answered(log, marker, answer string) bool {
	if marker != "" {
		var ok bool
		if _, log, ok = strings.Cut(log, marker); !ok {
			return false
		}
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.TrimSpace(l) == answer {
			return true
		}
	}
	return false
}

// startCheckPod creates p's pod on its Node (keeping one left from an earlier run of the same lab).
func startCheckPod(ctx context.Context, c client.Client, p *checkPod) error {
	return stack.StartAnswerPod(ctx, c, stack.AnswerPod(p.name, p.node, p.answer(), map[string]string{"app.kubernetes.io/name": checkPodApp, SiteLabel: p.site}))
}

// ensureCheckService creates the ClusterIP Service in front of p's pod (keeping one left from an earlier
// run of the same lab) and records its ClusterIP: the check fetches each answer through it too, which the
// workload cluster's kube-proxy routes on every Node.
func ensureCheckService(ctx context.Context, c client.Client, p *checkPod) error {
	port, err := strconv.ParseInt(stack.AnswerPort, 10, 32)
	if err != nil {
		return fmt.Errorf("failed to parse the answer port %q: %w", stack.AnswerPort, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default", Labels: map[string]string{"app.kubernetes.io/name": checkPodApp}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app.kubernetes.io/name": checkPodApp, SiteLabel: p.site},
			Ports:    []corev1.ServicePort{{Name: "http", Port: int32(port), TargetPort: intstr.FromInt32(int32(port))}},
		},
	}
	if err := c.Create(ctx, svc); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create the check Service %s: %w", p.name, err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			return fmt.Errorf("failed to get the check Service %s: %w", p.name, err)
		}
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return fmt.Errorf("the check Service %s has no ClusterIP (%q)", p.name, svc.Spec.ClusterIP)
	}
	p.serviceIP = svc.Spec.ClusterIP
	return nil
}

// waitPodIP waits until p's pod runs and records its IP; a pod that does not run is reported with its
// Warning events (a sandbox the CNI could not set up says why there, not in the container's state).
func waitPodIP(ctx context.Context, c client.Client, p *checkPod, timeout time.Duration) error {
	ip, err := stack.WaitPodIP(ctx, c, p.name, timeout)
	p.ip = ip
	if err != nil {
		return fmt.Errorf("%w%s", err, warnings(ctx, c, p.name))
	}
	return nil
}

// warnings are the last Warning events of pod default/name, as "; Warning events: Reason: message (xN); …".
func warnings(ctx context.Context, c client.Client, name string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	evs := &corev1.EventList{}
	if err := c.List(ctx, evs, client.InNamespace("default"), client.MatchingFields{"involvedObject.name": name}); err != nil {
		return fmt.Sprintf("; its events could not be read: %v", err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Pod" {
			continue
		}
		msg := strings.TrimSpace(e.Message)
		if len(msg) > 400 {
			msg = msg[:400] + "…"
		}
		out = append(out, fmt.Sprintf("%s: %s (x%d)", e.Reason, msg, max(e.Count, 1)))
	}
	if len(out) == 0 {
		return "; no Warning events"
	}
	return "; Warning events: " + strings.Join(out[max(0, len(out)-3):], "; ")
}

// runClient runs a client pod next to from (same Node, same site) that fetches to's answer over HTTP and
// pings it, and returns the client's log.
func runClient(ctx context.Context, c client.Client, cs kubernetes.Interface, from, to *checkPod, timeout time.Duration) (string, error) {
	out, err := stack.FetchAnswer(ctx, c, cs, from.name+"-to-"+to.site, from.node, stack.Fetch{IP: to.ip, ServiceIP: to.serviceIP, Download: true},
		map[string]string{"app.kubernetes.io/name": clientPodApp}, timeout)
	if err != nil {
		return "", fmt.Errorf("pod-to-pod check failed: %w", err)
	}
	return out, nil
}
