package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/site"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/stack"
	"github.com/yonder-dev/yonder/test/testbins"
)

// SiteLabel is the Node label the lab sets from the site of the host a Node runs on; the lab's Sites and
// GatewayPools select it. (The network controller's own output label is network.yonder.dev/site.)
const SiteLabel = "lab.node-restriction.kubernetes.io/site"

// networkImages are the add-on's images the lab builds with hack/images and hands to every node; their
// names and tags are the ones the embedded manifests (network/config/default) reference.
var networkImages = []string{"yonder-net-controller", "yonder-net-node"}

// imageRegistry and imageTag are hack/images' defaults, which network/config/* reference.
const (
	imageRegistry = "ghcr.io/yonder-dev"
	imageTag      = "dev"
)

// buildNetworkImages builds the add-on's images as OCI archives into dir with hack/images and returns
// them by image name (the key of stack.Options.ExtraImages). It fails early when the embedded manifests
// reference other image names than the ones built, which would leave the pods in ErrImageNeverPull.
func buildNetworkImages(ctx context.Context, dir string) (map[string]string, error) {
	objs, err := site.Objects()
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range networkImages {
		want[imageRegistry+"/"+n+":"+imageTag] = true
	}
	for _, u := range objs {
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			img, _, _ := unstructured.NestedString(c.(map[string]any), "image")
			if img != "" && !want[img] {
				return nil, fmt.Errorf("failed to match the network add-on's images: %s %s uses %s, the lab builds %v", u.GetKind(), u.GetName(), img, networkImages)
			}
		}
	}
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/images", "-out", dir, "-registry", imageRegistry, "-tag", imageTag,
		"-only", strings.Join(networkImages, ","))
	cmd.Dir = testbins.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("failed to build the network add-on's images (go run ./hack/images; it needs iptables on this machine): %s: %w", out, err)
	}
	imgs := map[string]string{}
	for _, n := range networkImages {
		p := filepath.Join(dir, n+".oci.tar")
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("failed to find the image archive %s: %w", p, err)
		}
		imgs[n] = p
	}
	return imgs, nil
}

// labSite is one site of the lab as the network add-on sees it.
type labSite struct {
	name  string
	nodes []string
}

// nodeSites maps every worker Node of the lab's Cluster to its site (the failure domain of its host).
func nodeSites(ctx context.Context, s *stack.Stack, namespace string, remotes []*remoteSite) (map[string]string, error) {
	ms := &clusterv1.MachineList{}
	if err := s.Client.List(ctx, ms, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: ClusterName}); err != nil {
		return nil, fmt.Errorf("failed to list Machines: %w", err)
	}
	out := map[string]string{}
	for _, m := range ms.Items {
		if !m.Status.NodeRef.IsDefined() {
			continue
		}
		host := m.Spec.ProviderID[strings.LastIndex(m.Spec.ProviderID, "/")+1:]
		st := siteOf(s, m)
		for _, r := range remotes {
			for _, h := range r.hosts {
				if h.Name == host {
					st = r.name
				}
			}
		}
		out[m.Status.NodeRef.Name] = st
	}
	return out, nil
}

// labelNodes sets SiteLabel on every Node in sites (a no-op for Nodes that have it).
func labelNodes(ctx context.Context, c client.Client, sites map[string]string) error {
	for node, st := range sites {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			if apierrors.IsNotFound(err) {
				continue // deleted since its Machine was listed
			}
			return fmt.Errorf("failed to get Node %s: %w", node, err)
		}
		if n.Labels[SiteLabel] == st {
			continue
		}
		p := client.MergeFrom(n.DeepCopy())
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[SiteLabel] = st
		if err := c.Patch(ctx, n, p); err != nil {
			return fmt.Errorf("failed to label Node %s with its site: %w", node, err)
		}
	}
	return nil
}

// installNetwork installs the network add-on into the workload cluster and configures one Site per lab
// site (selected by SiteLabel), every Node of a site a gateway candidate that may relay, and a
// Gateway-topology peering of all sites; it waits until the controller runs, every Node's daemon publishes
// a Ready NodeNetwork and its reachability, and every link is up with the kind the lab's NAT makes it
// (natSites: the sites behind NAT — the add-on is not told, it detects them).
func installNetwork(ctx context.Context, s *stack.Stack, nodes map[string]string, natSites map[string]bool, timeout time.Duration, step func(string, ...any)) error {
	c, err := client.New(s.Workload.Config, client.Options{Scheme: cli.Scheme})
	if err != nil {
		return fmt.Errorf("failed to create the workload client: %w", err)
	}
	// The manifests as they are embedded: the pods reach the API server through the kubernetes Service,
	// which the workload cluster's kube-proxy routes on every Node (stack.Options.KubeProxy).
	objs, err := site.Objects()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := site.Apply(ctx, c, objs, time.Minute, nil); err != nil {
		return err
	}
	step("network add-on applied (the embedded manifests of `kubectl yonder site init`, %d objects; images from hack/images pulled by every node through the lab registry) in %.1fs", len(objs), time.Since(t0).Seconds())

	if err := labelNodes(ctx, c, nodes); err != nil {
		return err
	}
	var sites []labSite
	for node, st := range nodes {
		i := slices.IndexFunc(sites, func(l labSite) bool { return l.name == st })
		if i < 0 {
			sites = append(sites, labSite{name: st})
			i = len(sites) - 1
		}
		sites[i].nodes = append(sites[i].nodes, node)
	}
	slices.SortFunc(sites, func(a, b labSite) int { return strings.Compare(a.name, b.name) })
	var config []client.Object
	var names []string
	for _, st := range sites {
		sel := metav1.LabelSelector{MatchLabels: map[string]string{SiteLabel: st.name}}
		config = append(config,
			&netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: st.name}, Spec: netv1.SiteSpec{NodeSelector: &sel}},
			// Every pool may relay: the controller relays only through reachable gateways, so it picks the
			// relay of the two NATed sites among site-a and site-b itself.
			&netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: st.name + "-gateways"}, Spec: netv1.GatewayPoolSpec{Site: st.name, NodeSelector: sel, Relay: true}})
		names = append(names, st.name)
	}
	if len(sites) > 1 {
		config = append(config, &netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "lab"},
			Spec: netv1.SitePeeringSpec{Sites: names, Topology: netv1.TopologyGateway}})
	}
	// The controller's webhook admits these: wait until it answers (its pods start, create their serving
	// certificate and patch the webhook configuration).
	for _, o := range config {
		if err := createWhenAdmitted(ctx, c, o, timeout); err != nil {
			return fmt.Errorf("failed to create %T %s (is yonder-net-controller running? `kubectl -n yonder-network get pods`): %w", o, o.GetName(), err)
		}
	}
	step("Sites %v (nodes selected by label %s, every node a gateway candidate that may relay) and a Gateway-topology SitePeering created (%.1fs)", names, SiteLabel, time.Since(t0).Seconds())
	return waitForNetwork(ctx, c, s.Workload.Config, s.Logs(), nodes, natSites, len(sites) > 1, timeout, step)
}

// createWhenAdmitted creates o, retrying while the admission webhook cannot be called yet; an object that
// exists already is left alone (the lab creates these objects once).
func createWhenAdmitted(ctx context.Context, c client.Client, o client.Object, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		last = c.Create(ctx, o.DeepCopyObject().(client.Object))
		switch {
		case last == nil, apierrors.IsAlreadyExists(last):
			return true, nil
		case apierrors.IsInternalError(last) && strings.Contains(last.Error(), "failed calling webhook"):
			return false, nil
		default:
			return false, last
		}
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// waitForNetwork waits until the controller Deployment is available, a yonder-net-node pod is Ready on
// every Node, every Node's NodeNetwork is Ready and (peered) has a reachability verdict and every
// SitePeering link is up with the kind the NAT sites give it (Direct between reachable sites, otherwise
// NATInitiated or Relayed), printing progress.
func waitForNetwork(ctx context.Context, c client.Client, cfg *rest.Config, logDir string, nodes map[string]string, natSites map[string]bool, peered bool, timeout time.Duration, step func(string, ...any)) error {
	t0 := time.Now()
	last, msg := "", ""
	err := stack.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		p, ok := networkProgress(ctx, c, nodes, natSites)
		if !ok {
			return false, nil // transient: keep waiting
		}
		msg = p.String()
		if msg != last {
			step("%s", msg)
			last = msg
		}
		return p.done(len(nodes), peered), nil
	})
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted while waiting for the network: %w", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("the network did not converge in %s (last: %s; `kubectl -n yonder-network get pods -o wide`, `kubectl get nodenetworks,sites,sitepeerings`): %w\n%s",
			timeout, msg, err, networkDiagnostics(context.WithoutCancel(ctx), c, cfg, logDir))
	}
	step("network converged in %.1fs", time.Since(t0).Seconds())
	return nil
}

// progress is what waitForNetwork counts.
type progress struct {
	available, replicas, daemons, nodes, ready, detected, detectable, links, up, settled int
}

func (p progress) String() string {
	return fmt.Sprintf("controller %d/%d available; yonder-net-node %d/%d Ready; NodeNetworks %d/%d Ready, %d/%d reachability detected; links %d/%d up, %d/%d of the expected kind",
		p.available, p.replicas, p.daemons, p.nodes, p.ready, p.nodes, p.detected, p.detectable, p.up, p.links, p.settled, p.links)
}

func (p progress) done(nodes int, peered bool) bool {
	return p.available > 0 && p.daemons >= nodes && p.ready >= nodes &&
		(!peered || (p.detected >= p.detectable && p.links > 0 && p.up == p.links && p.settled == p.links))
}

// detectable reports whether a Node at site can learn its reachability: a reachable site other than its
// own has a Node to check with.
func detectable(site string, nodes map[string]string, natSites map[string]bool) bool {
	for _, other := range nodes {
		if other != site && !natSites[other] {
			return true
		}
	}
	return false
}

// networkProgress reads the add-on's state; false when a read failed.
func networkProgress(ctx context.Context, c client.Client, nodes map[string]string, natSites map[string]bool) (progress, bool) {
	dep := &appsv1.Deployment{}
	ds := &appsv1.DaemonSet{}
	nns := &netv1.NodeNetworkList{}
	sps := &netv1.SitePeeringList{}
	if c.Get(ctx, client.ObjectKey{Namespace: addonNamespace, Name: "yonder-net-controller"}, dep) != nil ||
		c.Get(ctx, client.ObjectKey{Namespace: addonNamespace, Name: "yonder-net-node"}, ds) != nil ||
		c.List(ctx, nns) != nil || c.List(ctx, sps) != nil {
		return progress{}, false
	}
	p := progress{available: int(dep.Status.AvailableReplicas), replicas: int(ptrOr(dep.Spec.Replicas, 1)), daemons: int(ds.Status.NumberReady), nodes: len(nodes)}
	for _, nn := range nns.Items {
		site, ok := nodes[nn.Name]
		if !ok {
			continue
		}
		if meta.IsStatusConditionTrue(nn.Status.Conditions, netv1.ReadyCondition) {
			p.ready++
		}
		if detectable(site, nodes, natSites) {
			p.detectable++
			if nn.Spec.Reachability != nil {
				p.detected++
			}
		}
	}
	for _, sp := range sps.Items {
		for _, l := range sp.Status.Links {
			p.links++
			if l.Up {
				p.up++
			}
			if len(l.Sites) == 2 && (l.Kind == netv1.LinkKindDirect) == (!natSites[l.Sites[0]] && !natSites[l.Sites[1]]) &&
				(l.Kind == netv1.LinkKindRelayed) == (natSites[l.Sites[0]] && natSites[l.Sites[1]]) {
				p.settled++
			}
		}
	}
	return p, true
}

func ptrOr(p *int32, d int32) int32 {
	if p == nil {
		return d
	}
	return *p
}

// errNoSiteNodes is returned when the pod check has no Node at two sites to place its pods on.
var errNoSiteNodes = errors.New("the pod check needs Ready Nodes at two sites")

// netTimeout bounds each wait of the network step and of the pod check.
const netTimeout = 3 * time.Minute

// networkDiagnostics describes the add-on's pods (phase, restarts, why they wait or last ended) and the
// NodeNetworks' Ready conditions, and saves each pod's log into logDir, for the error of a failed wait.
func networkDiagnostics(ctx context.Context, c client.Client, cfg *rest.Config, logDir string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var b strings.Builder
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(addonNamespace)); err != nil {
		return fmt.Sprintf("(failed to list the add-on's pods: %v)", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s on %s: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, st := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, ", %d restarts", st.RestartCount)
			if w := st.State.Waiting; w != nil {
				fmt.Fprintf(&b, ", waiting: %s %s", w.Reason, w.Message)
			}
			if t := st.LastTerminationState.Terminated; t != nil {
				fmt.Fprintf(&b, ", last exit %d %s: %s", t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
			}
		}
		if err == nil {
			for _, previous := range []bool{false, true} {
				logs, lerr := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
				if lerr != nil {
					continue
				}
				name := p.Name
				if previous {
					name += ".previous"
				}
				f := filepath.Join(logDir, "workload-"+name+".log")
				if os.WriteFile(f, logs, 0o600) == nil {
					fmt.Fprintf(&b, " (log: %s)", f)
				}
			}
		}
		b.WriteString("\n")
	}
	evs := &corev1.EventList{}
	if err := c.List(ctx, evs, client.InNamespace(addonNamespace)); err == nil {
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning {
				fmt.Fprintf(&b, "event %s %s: %s: %s (x%d)\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, strings.TrimSpace(e.Message), e.Count)
			}
		}
	}
	nns := &netv1.NodeNetworkList{}
	if err := c.List(ctx, nns); err == nil {
		for _, nn := range nns.Items {
			if cond := meta.FindStatusCondition(nn.Status.Conditions, netv1.ReadyCondition); cond != nil {
				fmt.Fprintf(&b, "NodeNetwork %s: Ready %s %s: %s\n", nn.Name, cond.Status, cond.Reason, cond.Message)
			} else {
				fmt.Fprintf(&b, "NodeNetwork %s: no Ready condition\n", nn.Name)
			}
		}
	}
	return b.String()
}

// addonNamespace is where the network add-on's manifests put the controller and the node daemons.
const addonNamespace = "yonder-network"

// keepLabelling labels Nodes that join while the lab runs (`kubectl scale`, a remediated Machine's
// replacement) with their site every few seconds, so they join their Site and get tunnels, and points
// Prometheus's yonder-net-node and yonder-net-controller jobs (scrape, nil for none) at the Nodes and
// controller pods there are now; it returns when ctx ends.
func keepLabelling(ctx context.Context, s *stack.Stack, namespace string, remotes []*remoteSite, scrape *netNodeScrape) {
	_ = wait.PollUntilContextCancel(ctx, 5*time.Second, false, func(ctx context.Context) (bool, error) {
		if nodes, err := nodeSites(ctx, s, namespace, remotes); err == nil {
			_ = labelNodes(ctx, s.WorkloadClient, nodes)
			if scrape != nil {
				_, _ = scrape.update(ctx, s, nodes)
				_, _ = scrape.updateController(ctx, s)
			}
		}
		return false, nil
	})
}
