package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/stack"
)

// podCheckLabels mark the pods of the e2e pod check.
var podCheckLabels = map[string]string{"app.kubernetes.io/name": "e2e-pod-check"}

// pingReceived is ping's summary line.
var pingReceived = regexp.MustCompile(`(\d+) packets transmitted, (\d+) packets received`)

// expectPodsAnswer proves that every Machine's Node runs pods on a working pod network, the way a user's
// workload would use it: a pod serving an answer over HTTP starts on the Node, gets an address from that
// Node's pod CIDR, and a client pod next to it fetches the answer by pod IP (through the Node's bridge and
// veths), gets an answer from the workload API server (off every Node: the pod's traffic must leave the
// Node and the reply come back) and pings the answer pod. A Node on a reused host whose network state survived the previous Node (cni0 with
// the old pod CIDR) fails here: its pods never start. The stack has one site and no network add-on, so
// traffic between Nodes is the lab's check (cmd/kubectl-yonder/internal/lab), not this one. Pods are
// deleted afterwards; the Nodes are checked in parallel.
func expectPodsAnswer(ctx context.Context, t *testing.T, ms []clusterv1.Machine) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(st.Workload.Config)
	if err != nil {
		t.Fatalf("failed to create the workload clientset: %v", err)
	}
	t0 := time.Now()
	errs := make([]error, len(ms))
	nodes := make([]string, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		nodes[i] = m.Status.NodeRef.Name
		wg.Go(func() { errs[i] = podAnswers(ctx, cs, m.Name, m.Status.NodeRef.Name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("pod check failed:\n%v", err)
	}
	t.Logf("pods ran and answered over the pod network on %d Nodes (%s) in %s", len(ms), strings.Join(nodes, ", "), time.Since(t0).Round(100*time.Millisecond))
}

// podAnswers runs the pod check of expectPodsAnswer on one Node, naming its pods after the Machine (a host
// reused by a later Machine gets new pods, never one still terminating on the previous Node).
func podAnswers(ctx context.Context, cs kubernetes.Interface, machine, node string) error {
	c := st.WorkloadClient
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
	if err != nil {
		return fmt.Errorf("node %s has no pod CIDR (%q): %w", node, n.Spec.PodCIDR, err)
	}
	name := "answer-" + machine
	answer := "hello from " + name + " on " + node
	server := stack.AnswerPod(name, node, answer, podCheckLabels)
	if err := stack.StartAnswerPod(ctx, c, server); err != nil {
		return err
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), server) }()
	ip, err := stack.WaitPodIP(ctx, c, name, 3*time.Minute)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if a, err := netip.ParseAddr(ip); err != nil || !cidr.Contains(a) {
		return fmt.Errorf("node %s: pod %s got address %s, outside the Node's pod CIDR %s", node, name, ip, cidr)
	}
	// The workload API server runs off every Node, as a user's control plane does: what any operator, or a
	// pod that resolves a name through the cluster's DNS, must reach. It answers a plain HTTP request on its
	// TLS port with Go's "400 Bad Request".
	apiserver := net.JoinHostPort(st.Workload.Host.String(), strconv.Itoa(st.Workload.Port))
	out, err := stack.FetchAnswer(ctx, c, cs, name+"-client", node, stack.Fetch{IP: ip, Egress: apiserver}, podCheckLabels, 3*time.Minute)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	_, resp, _ := strings.Cut(out, "TCP response:\n")
	if !slices.ContainsFunc(strings.Split(resp, "\n"), func(l string) bool { return strings.TrimSpace(l) == answer }) {
		return fmt.Errorf("node %s: the client next to %s (%s) did not get its answer %q over TCP; its log:\n%s", node, name, ip, answer, out)
	}
	if _, resp, _ := strings.Cut(out, "Egress response:\n"); !strings.Contains(resp, "400 Bad Request") {
		return fmt.Errorf("node %s: a pod on it got no answer from the API server at %s (its traffic does not leave the Node, or the answer does not come back); its log:\n%s", node, apiserver, out)
	}
	if m := pingReceived.FindStringSubmatch(out); m == nil || m[2] == "0" {
		return fmt.Errorf("node %s: the client next to %s got no echo reply from %s; its log:\n%s", node, name, ip, out)
	}
	return nil
}
