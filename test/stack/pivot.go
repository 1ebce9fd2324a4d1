package stack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/certmanager"
	"github.com/yonder-dev/yonder/test/testbins"
)

// The bootstrap-and-pivot flow: a user's first management cluster creates a cluster, then `clusterctl init`
// installs the same providers INTO that cluster and `clusterctl move` hands it its own objects, so it
// manages itself (and later moves them back, e.g. before it is deleted). ManageFromWorkload makes the
// stack's workload cluster such a management cluster. Unlike the stack's own management cluster, where the
// providers' Deployments run as processes, here they run as what they are: Pods, scheduled on the workload
// cluster's Nodes (Yonder Nodes: real kubelets), pulling their images from the stack's registry through the
// nodes' mirrors (Yonder's release images, pinned by digest, as ghcr.io's; CAPI's as registry.k8s.io's),
// started, probed and restarted by the kubelet, authenticated by their ServiceAccounts' projected tokens,
// serving webhooks from Pod addresses with the certificates cert-manager issued into the Secrets they mount,
// electing leaders among themselves.
//
// What the workload cluster needs for it, and a user's cluster needs too (docs/clusterctl.md, "Moving the
// management onto Yonder Nodes"):
//   - Pods reach the API server: the cluster's kube-proxy (Options.KubeProxy) for the kubernetes Service,
//     and the Node's masquerade for traffic that leaves it (the agent's pod network does it);
//   - the API server reaches the webhook Pods at their addresses (the apiserver runs with
//     --enable-aggregator-routing and calls the EndpointSlice's Pod IPs): the Nodes' pod CIDRs must be
//     routable from the control plane. Here the control plane runs on this machine and every Node of the
//     stack's sites sits on the lab bridge, so the stack keeps a route per Node's pod CIDR via the Node's
//     address on this machine (startPodRoutes), as a user's router, cloud route table or BGP speaker does.
//
// cert-manager runs the same way: `clusterctl init` installs the release's cert-manager.yaml (cert-manager's
// chart, rendered by hack/release-repo.sh) and its controller, cainjector and webhook run as that chart's
// Deployments, from images of the binaries test-bins builds from cert-manager's packages under cert-manager's
// image names (quay.io/jetstack/…), through the nodes' mirror of quay.io. No harness process stands in for
// anything on this cluster.

// upstreamImage is how the stack builds a release image of another project from the binary test-bins built
// from that project's packages: the image holds the binary alone, at the path its Deployment runs, and runs
// as the non-root user the upstream image uses (distroless's nonroot, 65532).
type upstreamImage struct {
	binary, path string
}

// upstreamImages are the upstream images the stack's registry serves, by repository (without the tag): CAPI's
// providers (registry.k8s.io/cluster-api, named so by hack/release-repo.sh) and cert-manager's (its chart's
// quay.io/jetstack images). pushUpstreamImages pushes those the repository's manifests name, at their tags.
var upstreamImages = map[string]upstreamImage{
	"registry.k8s.io/cluster-api/cluster-api-controller":           {binary: "capi-manager", path: "manager"},
	"registry.k8s.io/cluster-api/kubeadm-bootstrap-controller":     {binary: "capi-kubeadm-bootstrap-manager", path: "manager"},
	"registry.k8s.io/cluster-api/kubeadm-control-plane-controller": {binary: "capi-kubeadm-control-plane-manager", path: "manager"},
	"quay.io/jetstack/cert-manager-controller":                     {binary: certmanager.ControllerBinary, path: certmanager.ControllerBinary},
	"quay.io/jetstack/cert-manager-cainjector":                     {binary: certmanager.CAInjectorBinary, path: certmanager.CAInjectorBinary},
	"quay.io/jetstack/cert-manager-webhook":                        {binary: certmanager.WebhookBinary, path: certmanager.WebhookBinary},
}

// upstreamNonRootUser is the user of the upstream images (distroless nonroot).
const upstreamNonRootUser = "65532"

// Bounds of ManageFromWorkload's waits.
const (
	// providerPodsTimeout bounds the wait for every provider Deployment to become Available: image pulls from
	// the registry (the managers are 30-90 MB each), container starts and the first leader elections on a
	// busy 2-core machine.
	providerPodsTimeout = 6 * time.Minute
	// podRouteSyncInterval is how often the pod CIDR routes follow the Nodes.
	podRouteSyncInterval = time.Second
)

// ManageFromWorkload installs the providers into the stack's workload cluster with the real `clusterctl
// init` (the same providers, variables and repository as the stack's management cluster; cert-manager from
// the repository's manifest) and waits until every provider Deployment and cert-manager's are Available:
// their Pods Ready on the workload cluster's Nodes. The returned Stack's
// Management and Client are the workload cluster's, so its Clusterctl acts there (the target of a `clusterctl
// move`). Its Stop deletes the providers again (`clusterctl delete --all`, which leaves CRDs, namespaces
// and every inventory object in place), then cert-manager, and removes the routes; it never stops the
// workload cluster. The workload cluster must run kube-proxy (Options.KubeProxy) and have a Ready Node.
func (s *Stack) ManageFromWorkload(ctx context.Context) (_ *Stack, rerr error) {
	if !s.opts.KubeProxy {
		return nil, errors.New("failed to make the workload cluster a management cluster: its Pods reach the API server through the kubernetes Service, which needs kube-proxy (Options.KubeProxy)")
	}
	t0 := time.Now()
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(s.Workload.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to create a management client of the workload cluster: %w", err)
	}
	t, err := s.sharing("pivot")
	if err != nil {
		return nil, err
	}
	t.Management, t.Client, t.onWorkload = s.Workload, c, true
	defer func() {
		if rerr != nil {
			_ = t.Stop()
		}
	}()
	if err := s.pushUpstreamImages(ctx); err != nil {
		return nil, err
	}
	routes, err := startPodRoutes(ctx, s.WorkloadClient, s.Net.Bridge, t.logf)
	if err != nil {
		return nil, err
	}
	t.podRoutes = routes
	// clusterctl init installs cert-manager's manifest, waits until its API admits clusterctl's test
	// resources (its Pods serve), then installs the providers; cert-manager then issues their certificates.
	t1 := time.Now()
	if err := t.clusterctlInit(ctx); err != nil {
		return nil, err
	}
	t.opts.Log("clusterctl init into the workload cluster done (cert-manager's Pods serving) in %s", time.Since(t1).Round(time.Millisecond))
	if err := certmanager.WaitForCertificates(ctx, t.Client, certificatesTimeout); err != nil {
		return nil, fmt.Errorf("workload cluster: %w", err)
	}
	if err := t.waitProviderPods(ctx); err != nil {
		return nil, err
	}
	// clusterctl move creates objects in the namespaces they had; it does not create namespaces.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t.HostNamespace}}
	if err := t.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("failed to create namespace %s in the workload cluster: %w", t.HostNamespace, err)
	}
	t.opts.Log("workload cluster manages: providers running as Pods on its Nodes in %s", time.Since(t0).Round(time.Millisecond))
	return t, nil
}

func (s *Stack) logf(format string, args ...any) { s.opts.Log(format, args...) }

// ProviderPods returns the Pods of the provider Deployments clusterctl installed (ProviderLabel), by
// Deployment namespace/name.
func (s *Stack) ProviderPods(ctx context.Context) (map[string][]corev1.Pod, error) {
	return s.deploymentPods(ctx, client.HasLabels{ProviderLabel})
}

// CertManagerPods returns the Pods of cert-manager's Deployments (its chart's, in its namespace), by
// Deployment namespace/name.
func (s *Stack) CertManagerPods(ctx context.Context) (map[string][]corev1.Pod, error) {
	return s.deploymentPods(ctx, client.InNamespace(certmanager.Namespace))
}

// deploymentPods returns the Pods of the Deployments opts select, by Deployment namespace/name.
func (s *Stack) deploymentPods(ctx context.Context, opts ...client.ListOption) (map[string][]corev1.Pod, error) {
	ds := &appsv1.DeploymentList{}
	if err := s.Client.List(ctx, ds, opts...); err != nil {
		return nil, fmt.Errorf("failed to list Deployments: %w", err)
	}
	out := map[string][]corev1.Pod{}
	for _, d := range ds.Items {
		pods := &corev1.PodList{}
		if err := s.Client.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return nil, fmt.Errorf("failed to list the Pods of Deployment %s/%s: %w", d.Namespace, d.Name, err)
		}
		out[d.Namespace+"/"+d.Name] = pods.Items
	}
	return out, nil
}

// waitProviderPods waits until every provider Deployment and cert-manager's are Available with all their
// replicas updated and ready, and says why not when it gives up (each Pod's phase, waiting reasons and restarts).
func (s *Stack) waitProviderPods(ctx context.Context) error {
	last := ""
	err := WaitFor(ctx, providerPodsTimeout, func(ctx context.Context) (bool, error) {
		providers, cm := &appsv1.DeploymentList{}, &appsv1.DeploymentList{}
		if err := s.Client.List(ctx, providers, client.HasLabels{ProviderLabel}); err != nil {
			return false, nil //nolint:nilerr // transient: keep waiting
		}
		if err := s.Client.List(ctx, cm, client.InNamespace(certmanager.Namespace)); err != nil {
			return false, nil //nolint:nilerr // transient: keep waiting
		}
		if len(providers.Items) == 0 {
			last = "no provider Deployment installed"
			return false, nil
		}
		var waiting []string
		for _, d := range append(providers.Items, cm.Items...) {
			if !deploymentAvailable(&d) {
				waiting = append(waiting, d.Namespace+"/"+d.Name)
			}
		}
		last = "not Available: " + strings.Join(waiting, ", ")
		return len(waiting) == 0, nil
	})
	if err == nil {
		return nil
	}
	pods, perr := s.ProviderPods(ctx)
	if cm, err := s.CertManagerPods(ctx); err == nil {
		maps.Copy(pods, cm)
	}
	if perr != nil {
		return fmt.Errorf("the providers did not run as Pods in %s (%s): %w", providerPodsTimeout, last, errors.Join(err, perr))
	}
	return fmt.Errorf("the providers did not run as Pods in %s (%s); their Pods: %s: %w", providerPodsTimeout, last, describePods(pods), err)
}

// deploymentAvailable: the Deployment's controller has seen its spec, and every desired replica is
// updated, ready and available.
func deploymentAvailable(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.ReadyReplicas == want && st.AvailableReplicas == want && st.Replicas == want
}

// describePods summarizes Pods for an error: node, phase, and each container's state and restarts.
func describePods(byDeployment map[string][]corev1.Pod) string {
	var b strings.Builder
	for _, k := range sortedKeys(byDeployment) {
		fmt.Fprintf(&b, "\n  %s:", k)
		if len(byDeployment[k]) == 0 {
			b.WriteString(" no Pod")
		}
		for _, p := range byDeployment[k] {
			fmt.Fprintf(&b, " [%s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			for _, cs := range p.Status.ContainerStatuses {
				fmt.Fprintf(&b, "; %s ready=%t restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
				if w := cs.State.Waiting; w != nil {
					fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
				}
				if l := cs.LastTerminationState.Terminated; l != nil {
					fmt.Fprintf(&b, " last exit %d %s", l.ExitCode, l.Reason)
				}
			}
			b.WriteString("]")
		}
	}
	return b.String()
}

// imageRef matches an image reference with a tag in a manifest (quoted or not).
var imageRef = regexp.MustCompile(`image:\s*"?([a-z0-9.-]+(?:/[a-z0-9._-]+)+):([A-Za-z0-9._-]+)"?`)

// pushUpstreamImages pushes every upstream image (upstreamImages) that the manifests of the stack's clusterctl
// repository name — the CAPI providers' components and cert-manager's manifest — under its name and tag.
func (s *Stack) pushUpstreamImages(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(s.releaseDir(), "repository", "*", "*", "*.yaml"))
	if err != nil {
		return fmt.Errorf("failed to find the repository's manifests: %w", err)
	}
	pushed, pushedRepos := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // the stack's own repository, found by Glob
		if err != nil {
			return fmt.Errorf("failed to read %s: %w", f, err)
		}
		for _, m := range imageRef.FindAllStringSubmatch(string(data), -1) {
			repo, tag := m[1], m[2]
			img, ok := upstreamImages[repo]
			name := repo + ":" + tag
			if !ok || pushed[name] {
				continue
			}
			path, err := testbins.Path(img.binary)
			if err != nil {
				return err
			}
			archive := filepath.Join(s.binDir, filepath.Base(repo)+".oci.tar")
			if err := ociimage.WriteArchiveFile(archive, name, ociimage.Image{
				Files:      []ociimage.File{{Path: img.path, Source: path, Mode: 0o755}},
				Entrypoint: []string{"/" + img.path},
				User:       upstreamNonRootUser,
			}); err != nil {
				return fmt.Errorf("failed to write the image %s: %w", name, err)
			}
			if err := s.pushArchive(ctx, archive); err != nil {
				return err
			}
			pushed[name], pushedRepos[repo] = true, true
		}
	}
	for repo := range upstreamImages {
		if !pushedRepos[repo] {
			return fmt.Errorf("the repository's manifests (%d files) name no image of %s: the stack would run it from nowhere", len(files), repo)
		}
	}
	return nil
}

// podRoutes keeps a route on this machine for each Node's pod CIDR via the Node's address on the lab
// bridge, and removes the routes it added when stopped.
type podRoutes struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	added  map[netip.Prefix]netip.Addr
	bridge string
}

// startPodRoutes syncs the routes once (an error there is returned) and then every podRouteSyncInterval
// until Stop.
func startPodRoutes(ctx context.Context, c client.Client, bridge string, logf func(string, ...any)) (*podRoutes, error) {
	r := &podRoutes{added: map[netip.Prefix]netip.Addr{}, bridge: bridge, done: make(chan struct{})}
	if err := r.sync(ctx, c); err != nil {
		_ = r.removeAll()
		return nil, err
	}
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(r.done)
		tick := time.NewTicker(podRouteSyncInterval)
		defer tick.Stop()
		var lastErr string
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := r.sync(ctx, c); err != nil && err.Error() != lastErr && ctx.Err() == nil {
				lastErr = err.Error()
				logf("pod routes: %v", err)
			}
		}
	}()
	return r, nil
}

// sync makes the routes match the Nodes: one per Node with a pod CIDR and an IPv4 internal address, through
// the lab bridge (every Node of the stack's sites is on it). A route to the same prefix through another link is another stack's (or the machine's):
// it is reported, never replaced.
func (r *podRoutes) sync(ctx context.Context, c client.Client) error {
	link, err := netlink.LinkByName(r.bridge)
	if err != nil {
		return fmt.Errorf("failed to find the lab bridge %s: %w", r.bridge, err)
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return fmt.Errorf("failed to list the Nodes: %w", err)
	}
	want := map[netip.Prefix]netip.Addr{}
	for _, n := range nodes.Items {
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			continue
		}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); a.Type == corev1.NodeInternalIP && err == nil && ip.Is4() {
				want[cidr.Masked()] = ip
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for cidr, via := range want {
		if r.added[cidr] == via {
			continue
		}
		dst := prefixNet(cidr)
		existing, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to list the routes to %s: %w", cidr, err))
			continue
		}
		if i := slices.IndexFunc(existing, func(rt netlink.Route) bool { return rt.LinkIndex != link.Attrs().Index }); i >= 0 {
			errs = append(errs, fmt.Errorf("a route to %s through another link (index %d) exists: another stack routes this pod CIDR", cidr, existing[i].LinkIndex))
			continue
		}
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Gw: net.IP(via.AsSlice())}); err != nil {
			errs = append(errs, fmt.Errorf("failed to route %s via %s: %w", cidr, via, err))
			continue
		}
		r.added[cidr] = via
	}
	for cidr := range r.added {
		if _, ok := want[cidr]; !ok {
			if err := netlink.RouteDel(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(cidr)}); err != nil {
				errs = append(errs, fmt.Errorf("failed to remove the route to %s: %w", cidr, err))
				continue
			}
			delete(r.added, cidr)
		}
	}
	return errors.Join(errs...)
}

// Stop ends the sync and removes every route it added.
func (r *podRoutes) Stop() error {
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
	return r.removeAll()
}

func (r *podRoutes) removeAll() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	link, err := netlink.LinkByName(r.bridge)
	if err != nil {
		// The bridge is gone, and its routes with it.
		r.added = map[netip.Prefix]netip.Addr{}
		return nil //nolint:nilerr // nothing left to remove
	}
	var errs []error
	for cidr := range r.added {
		if err := netlink.RouteDel(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(cidr)}); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("failed to remove the route to %s: %w", cidr, err))
		}
		delete(r.added, cidr)
	}
	return errors.Join(errs...)
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// stopOnWorkload is Stop for a Stack of ManageFromWorkload: the providers deleted as a user deletes them
// (`clusterctl delete --all` keeps CRDs, namespaces and every inventory object), then cert-manager's
// manifest, then the routes; the workload cluster itself goes on.
func (s *Stack) stopOnWorkload() error {
	if s.stopped {
		return nil
	}
	s.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var errs []error
	if out, err := s.Clusterctl(ctx, nil, "delete", "--all"); err != nil {
		errs = append(errs, fmt.Errorf("failed to delete the providers from the workload cluster: %s: %w", out, err))
	}
	// clusterctl never deletes cert-manager; a user deletes its manifest (`kubectl delete -f`), so that its
	// Pods do not move to the cluster's next Nodes and its fail-closed webhook does not outlive them.
	if err := s.deleteCertManager(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.podRoutes != nil {
		errs = append(errs, s.podRoutes.Stop())
	}
	return errors.Join(errs...)
}

// providerPodLog returns the last n lines of each Pod of provider name (its ProviderLabel value), headed by
// the Pod's name.
func (s *Stack) providerPodLog(name string, n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := kubernetes.NewForConfig(s.Management.Config)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	ds := &appsv1.DeploymentList{}
	if err := s.Client.List(ctx, ds, client.MatchingLabels{ProviderLabel: name}); err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	var b strings.Builder
	for _, d := range ds.Items {
		pods := &corev1.PodList{}
		if err := s.Client.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			fmt.Fprintf(&b, "(no Pods of %s/%s: %v)\n", d.Namespace, d.Name, err)
			continue
		}
		for _, p := range pods.Items {
			logs, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To(int64(n))}).DoRaw(ctx)
			if err != nil {
				fmt.Fprintf(&b, "== Pod %s/%s on %s: no log: %v\n", p.Namespace, p.Name, p.Spec.NodeName, err)
				continue
			}
			fmt.Fprintf(&b, "== Pod %s/%s on %s:\n%s", p.Namespace, p.Name, p.Spec.NodeName, logs)
		}
	}
	return b.String()
}

// deleteCertManager deletes every object of the repository's cert-manager manifest from the cluster, as
// `kubectl delete -f cert-manager.yaml` does, and waits until its namespace is gone.
func (s *Stack) deleteCertManager(ctx context.Context) error {
	manifest, err := s.certManagerManifest()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Clean(manifest))
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", manifest, err)
	}
	objs, err := decodeYAML(data)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range objs {
		if err := s.Client.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("failed to delete %s %s: %w", o.GetKind(), o.GetName(), err))
		}
	}
	if err := WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		err := s.Client.Get(ctx, client.ObjectKey{Name: certmanager.Namespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("cert-manager's namespace was not deleted: %w", err))
	}
	return errors.Join(errs...)
}
