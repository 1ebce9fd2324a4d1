package lab

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/prometheus"
	"github.com/yonder-dev/yonder/test/stack"
	"github.com/yonder-dev/yonder/test/testbins"
)

// NetNodeJob is the lab Prometheus's scrape job of the network add-on's node daemons: every Node's
// yonder-net-node, labelled node and site. (The managers are the stack's jobs stack.ProvidersJob and
// stack.CAPIJob.)
const NetNodeJob = "yonder-net-node"

// NetControllerJob is the lab Prometheus's scrape job of the network add-on's controller: every
// yonder-net-controller replica, labelled pod and node (only the leader counts gateway elections).
const NetControllerJob = "yonder-net-controller"

// netNodeMetricsPort is yonder-net-node's metrics port (--metrics-bind-address in
// network/config/node/daemonset.yaml): it runs with the host's network, so the port is on the Node's address.
const netNodeMetricsPort = "9871"

// netControllerMetricsPort is yonder-net-controller's (network/config/manager/manager.yaml): host network
// too, so the port is on its pod's host IP.
const netControllerMetricsPort = "9862"

// netControllerSelector selects the controller's pods in the add-on's namespace.
var netControllerSelector = client.MatchingLabels{"app.kubernetes.io/name": "yonder-net-controller"}

// netNodeScrape keeps the lab Prometheus's yonder-net-node job on the Nodes there are, and its
// yonder-net-controller job on the controller's running pods: Nodes come and go with scaling and
// remediation, and the controller's pods move with them.
type netNodeScrape struct {
	// token is a workload-cluster ServiceAccount's, bound to the add-on's shipped metrics-reader role: the
	// daemons and the controller review scrapers with the workload API server.
	token string
	// last and lastController are the target sets last written, so an unchanged set does not reload
	// Prometheus.
	last, lastController string
}

// newNetNodeScrape creates the workload cluster's scraper identity.
func newNetNodeScrape(ctx context.Context, s *stack.Stack) (*netNodeScrape, error) {
	token, err := stack.NewScraperToken(ctx, s.Workload.Config, filepath.Join(testbins.RepoRoot(), "network", "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		return nil, fmt.Errorf("failed to create the network metrics scraper in the workload cluster: %w", err)
	}
	return &netNodeScrape{token: token}, nil
}

// update points the job at every Node of nodes (Node → site) by its InternalIP; it returns how many.
func (n *netNodeScrape) update(ctx context.Context, s *stack.Stack, nodes map[string]string) (int, error) {
	targets := map[string]map[string]string{}
	for name, site := range nodes {
		node := &corev1.Node{}
		if err := s.WorkloadClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return 0, fmt.Errorf("failed to read Node %s: %w", name, err)
		}
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				targets[net.JoinHostPort(a.Address, netNodeMetricsPort)] = map[string]string{"node": name, "site": site}
			}
		}
	}
	return n.setJob(ctx, s, NetNodeJob, targets, &n.last)
}

// updateController points the yonder-net-controller job at the controller's running pods (host IP, metrics
// port); it returns how many.
func (n *netNodeScrape) updateController(ctx context.Context, s *stack.Stack) (int, error) {
	pods := &corev1.PodList{}
	if err := s.WorkloadClient.List(ctx, pods, client.InNamespace(addonNamespace), netControllerSelector); err != nil {
		return 0, fmt.Errorf("failed to list the yonder-net-controller pods: %w", err)
	}
	targets := map[string]map[string]string{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Status.HostIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		targets[net.JoinHostPort(p.Status.HostIP, netControllerMetricsPort)] = map[string]string{"pod": p.Name, "node": p.Spec.NodeName}
	}
	return n.setJob(ctx, s, NetControllerJob, targets, &n.lastController)
}

// setJob writes job's targets unless they are the set last written (*last), and returns how many.
func (n *netNodeScrape) setJob(ctx context.Context, s *stack.Stack, job string, targets map[string]map[string]string, last *string) (int, error) {
	key := targetsKey(targets)
	if key == *last {
		return len(targets), nil
	}
	// yonder-net-node and yonder-net-controller serve the self-signed certificate they generate at start
	// (as the managers do): no CA names it, so the job skips verification, as docs/network-dataplane.md's
	// does; the bearer token is what protects the endpoint.
	if err := s.Prometheus.SetJob(ctx, prometheus.Job{Name: job, Scheme: "https", Targets: targets, BearerToken: n.token, InsecureSkipVerify: true}); err != nil {
		return 0, err
	}
	*last = key
	return len(targets), nil
}

func targetsKey(targets map[string]map[string]string) string {
	ks := make([]string, 0, len(targets))
	for a, l := range targets {
		ks = append(ks, a+"="+l["node"]+"/"+l["pod"])
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}
