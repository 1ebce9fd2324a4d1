package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/yonder-dev/yonder/test/stack"
	"github.com/yonder-dev/yonder/test/testbins"
)

// ClusterName is the name of the lab's Cluster.
const ClusterName = "lab"

// siteName is the name of site i: site-a, site-b and so on.
func siteName(i int) string { return "site-" + string("abcdefghijklmnopqrstuvwxyz"[i%26]) }

// behindNAT says which sites are behind NAT: the third and fourth (site-c, site-d). site-a shares the
// management bridge and site-b is routed through its gateway; both accept connections.
func behindNAT(i int) bool { return i >= 2 }

// Serve runs the lab in this process: it brings everything up, prints the next commands and ReadyMarker,
// then holds the lab until ctx ends or SIGINT/SIGTERM arrives, and tears it all down.
func Serve(ctx context.Context, l *Options, out io.Writer, hold bool) (rerr error) {
	ctx, stop := notifyContext(ctx)
	defer stop()
	r := &labRun{l: l, out: out, start: time.Now()}
	defer func() {
		if rerr != nil {
			_, _ = fmt.Fprintf(out, "error: %v\n%s\n", rerr, FailedMarker)
		}
	}()
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", l.Dir, err)
	}
	r.st = &State{PID: os.Getpid(), Started: r.start, Dir: l.Dir, Namespace: "default"}
	if err := r.st.write(); err != nil {
		return err
	}
	defer func() { _ = os.Remove(StatePath(l.Dir)) }()
	if err := r.prepare(ctx, hold); err != nil {
		return err
	}
	if err := r.startStack(ctx); err != nil {
		return err
	}
	defer func() { rerr = r.teardown(rerr) }()
	if err := r.startSites(ctx); err != nil {
		return err
	}
	if !l.NoCluster {
		if err := r.cluster(ctx); err != nil {
			return err
		}
	}
	if err := addMetal(ctx, r.s, l, r.st, l.Dir, r.step); err != nil {
		return err
	}
	return r.ready(ctx, hold)
}

// labRun is one run of Serve: what it was asked for, what it has started and the state it records, so
// that each phase is a method.
type labRun struct {
	l     *Options
	out   io.Writer
	start time.Time
	st    *State
	// sites are the stack's own sites (the first one, on the management bridge).
	sites []stack.Site
	// images are the network add-on's images, pushed into the lab registry.
	images  map[string]string
	s       *stack.Stack
	remotes []*remoteSite
	// netScrape keeps Prometheus's yonder-net-node job on the Nodes there are (nil without a Cluster).
	netScrape *netNodeScrape
}

// step prints one progress line, with the seconds since the start.
func (r *labRun) step(format string, args ...any) {
	_, _ = fmt.Fprintf(r.out, "[lab %6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// prepare builds what is missing (test-bins, the network add-on's images) and raises the inotify limit
// the hosts' kubelets need.
func (r *labRun) prepare(ctx context.Context, hold bool) error {
	r.step("building what is missing: Kubernetes, etcd, CAPI, containerd and the node rootfs (the first time takes many minutes; progress follows), then Yonder's managers and agent")
	if err := testBins(ctx, r.out); err != nil {
		return err
	}
	r.step("binaries ready")
	if hold {
		// The stack's directory is recreated each time; its logs of the last run are gone with `lab down`.
		_ = os.RemoveAll(filepath.Join(r.l.Dir, "stack"))
	}
	r.st.StackDir = filepath.Join(r.l.Dir, "stack")
	if err := os.MkdirAll(r.st.StackDir, 0o700); err != nil {
		return err
	}
	// The first site shares the management bridge; every further site sits behind its own gateway.
	r.sites = []stack.Site{{Name: siteName(0), Hosts: r.l.HostsPerSite}}
	if !r.l.NoCluster {
		t0 := time.Now()
		var err error
		if r.images, err = buildNetworkImages(ctx, filepath.Join(r.st.StackDir, "images")); err != nil {
			return err
		}
		r.step("network add-on images %v built (go run ./hack/images) in %.1fs; pushed into the lab registry", networkImages, time.Since(t0).Seconds())
	}
	return stack.EnsureInotifyInstances(inotifyInstancesFor(r.l.HostsPerSite*r.l.Sites), r.step)
}

// startStack starts the management plane, the workload control plane and the first site's hosts.
func (r *labRun) startStack(ctx context.Context) error {
	s, err := stack.Start(ctx, stack.Options{Dir: r.st.StackDir, Sites: r.sites, HostNamespace: r.st.Namespace, FastNodeMonitoring: true,
		ExtraImages: r.images, MetalHosts: metalHosts(r.l), MetalDiskImage: r.l.Metal, Log: r.step,
		// The real Prometheus, scraping every manager; the network nodes are added once they run (cluster).
		Prometheus: true,
		// The workload cluster runs kube-proxy on every Node, as a kubeadm cluster does: the network
		// add-on's pods and the pod check reach ClusterIP Services through it.
		KubeProxy: true})
	if err != nil {
		return fmt.Errorf("failed to start the lab stack (logs in %s): %w", filepath.Join(r.st.StackDir, "logs"), err)
	}
	r.s = s
	r.st.Prometheus = s.Prometheus.URL
	return nil
}

// teardown stops everything startStack and startSites started and removes the lab's files; rerr is the
// run's error so far, returned with what the teardown reported. A failed run keeps the stack's directory.
func (r *labRun) teardown(rerr error) error {
	t0 := time.Now()
	r.step("tearing down: managers, hosts (yonder-agent reset), control planes, lab network %s", r.s.Net.Bridge)
	// The stack resets every host (remote ones through their gateways) before it removes its network;
	// the remote sites' networks go after it.
	if err := r.s.Stop(); err != nil {
		r.step("teardown reported: %v", err)
		rerr = errors.Join(rerr, err)
	}
	for _, rs := range r.remotes {
		if err := rs.close(); err != nil {
			r.step("teardown of site %s reported: %v", rs.name, err)
			rerr = errors.Join(rerr, err)
		}
	}
	if rerr == nil {
		_ = os.RemoveAll(r.st.StackDir)
	} else {
		r.step("kept %s (component logs in logs/) for a look at what failed", r.st.StackDir)
	}
	for _, f := range []string{"management.kubeconfig", "workload.kubeconfig", "id_ed25519", "known_hosts", "cluster.yaml"} {
		_ = os.Remove(filepath.Join(r.l.Dir, f))
	}
	r.step("lab removed in %.1fs", time.Since(t0).Seconds())
	return rerr
}

// startSites records the first site's hosts, starts every further site behind its gateway, and writes
// the access files and the state: every host is then a YonderSSHHost.
func (r *labRun) startSites(ctx context.Context) error {
	s, st, first := r.s, r.st, r.sites[0].Name
	st.Bridge, st.Prefix = s.Net.Bridge, s.Net.Prefix.String()
	st.Bridges = []string{s.Net.Bridge}
	for _, h := range s.Hosts[first] {
		st.Hosts = append(st.Hosts, Host{Name: h.Name, Site: first, Address: h.Address.String(), Namespace: h.Namespace})
	}
	r.step("site %s: %d hosts on the management bridge %s (%s)", first, r.l.HostsPerSite, s.Net.Bridge, s.Net.Prefix)
	for i := 1; i < r.l.Sites; i++ {
		t0 := time.Now()
		rs, err := startRemoteSite(ctx, s, first, siteName(i), r.l.HostsPerSite, behindNAT(i), r.remotes)
		if err != nil {
			return err
		}
		r.remotes = append(r.remotes, rs)
		st.Bridges = append(st.Bridges, rs.net.Bridge)
		if rs.nat {
			st.NATSites = append(st.NATSites, rs.name)
		}
		role, how := " (gateway)", "reachable only through gateway"
		if rs.nat {
			role, how = " (NAT gateway)", "behind NAT gateway"
		}
		st.Hosts = append(st.Hosts, Host{Name: rs.gateway.Namespace, Site: rs.name + role, Address: rs.gateway.Address.String() + "," + rs.gwSite.String(), Namespace: rs.gateway.Namespace})
		for _, h := range rs.hosts {
			st.Hosts = append(st.Hosts, Host{Name: h.Name, Site: rs.name, Address: h.Address.String(), Namespace: h.Namespace})
		}
		r.step("site %s: %d hosts on bridge %s (%s), %s %s/%s; checked SSH in and HTTPS out through it (%.1fs)",
			rs.name, r.l.HostsPerSite, rs.net.Bridge, rs.net.Prefix, how, rs.gateway.Address, rs.gwSite, time.Since(t0).Seconds())
	}
	if err := writeAccess(ctx, r.l.Dir, s, st); err != nil {
		return err
	}
	if err := st.write(); err != nil {
		return err
	}
	r.step("%d hosts at %d sites registered as YonderSSHHosts (failure domain = site)", r.l.HostsPerSite*r.l.Sites, r.l.Sites)
	return nil
}

// cluster applies the lab's Cluster, waits for its workers, installs the network add-on and runs the
// cross-site pod check.
func (r *labRun) cluster(ctx context.Context) error {
	l, s, st := r.l, r.s, r.st
	workers := l.Workers
	if workers == 0 {
		workers = l.HostsPerSite * l.Sites
	}
	st.Cluster = ClusterName
	t0 := time.Now()
	r.step("applying Cluster %q from templates/cluster-template-ssh.yaml (clusterctl generate cluster --flavor ssh) with %d workers", ClusterName, workers)
	if err := applyCluster(ctx, s, l.Dir, st.Namespace, workers); err != nil {
		return err
	}
	if err := st.write(); err != nil {
		return err
	}
	r.step("waiting for %d worker Nodes to be Ready at %d sites (each host: agent install, nspawn, containerd, kubelet TLS bootstrap)", workers, min(l.Sites, workers))
	if err := waitForNodes(ctx, s, st.Namespace, workers, min(l.Sites, workers), l.Timeout, r.step); err != nil {
		return err
	}
	r.step("%d workers Ready in %.1fs", workers, time.Since(t0).Seconds())

	t0 = time.Now()
	nodes, err := nodeSites(ctx, s, st.Namespace, r.remotes)
	if err != nil {
		return err
	}
	t1 := time.Now()
	if err := s.WaitKubeProxy(ctx, slices.Sorted(maps.Keys(nodes)), netTimeout); err != nil {
		return err
	}
	r.step("kube-proxy Ready on the %d Nodes (the workload cluster's DaemonSet, as kubeadm installs it) in %.1fs", len(nodes), time.Since(t1).Seconds())
	r.step("installing the network add-on into the workload cluster: yonder-net-controller, yonder-net-node on every Node, one Site per lab site")
	natSites := map[string]bool{}
	for _, rs := range r.remotes {
		natSites[rs.name] = rs.nat
	}
	if err := installNetwork(ctx, s, nodes, natSites, netTimeout, r.step); err != nil {
		return err
	}
	r.step("network ready in %.1fs", time.Since(t0).Seconds())
	t0 = time.Now()
	if r.netScrape, err = newNetNodeScrape(ctx, s); err != nil {
		return err
	}
	n, err := r.netScrape.update(ctx, s, nodes)
	if err != nil {
		return err
	}
	c, err := r.netScrape.updateController(ctx, s)
	if err != nil {
		return err
	}
	r.step("Prometheus %s scrapes %d managers, %d yonder-net-controller replicas and the yonder-net-node of %d Nodes (%.1fs)", s.Prometheus.URL, len(s.Managers()), c, n, time.Since(t0).Seconds())
	if l.Sites > 1 && workers > 1 {
		res, err := podCheck(ctx, s.WorkloadClient, s.Workload.Config, nodes, natSites, netTimeout, r.step)
		if err != nil {
			return err
		}
		res.At, res.Source = time.Now(), SourceUp
		st.PodCheck = res
	}
	return nil
}

// ready records the lab as ready, prints the next commands and ReadyMarker and, with hold, keeps the lab
// (and the Nodes' site labels) until ctx ends.
func (r *labRun) ready(ctx context.Context, hold bool) error {
	r.st.Ready = time.Now()
	if err := r.st.write(); err != nil {
		return err
	}
	r.step("lab ready in %.1fs", time.Since(r.start).Seconds())
	printNext(r.out, r.l, r.st)
	printPodNext(r.out, r.st)
	_, _ = fmt.Fprintln(r.out, ReadyMarker)
	if !hold {
		return nil
	}
	if !r.l.NoCluster {
		go keepLabelling(ctx, r.s, r.st.Namespace, r.remotes, r.netScrape)
	}
	<-ctx.Done()
	return nil
}

// testBins runs hack/test-bins.sh, passing its progress lines through: first its --preflight (root, Go,
// free disk: what it cannot install, checked before anything builds for many minutes), then the build of
// whatever is missing. A failure's error carries the script's last lines, which name the failed step.
func testBins(ctx context.Context, out io.Writer) error {
	script := filepath.Join(testbins.RepoRoot(), "hack", "test-bins.sh")
	for _, args := range [][]string{{script, "--preflight"}, {script}} {
		if err := runShowingTail(ctx, out, "bash", args...); err != nil {
			return fmt.Errorf("failed to prepare the binaries (%s): %w", strings.Join(append([]string{"hack/test-bins.sh"}, args[1:]...), " "), err)
		}
	}
	return nil
}

// tailLines is how many of a failed command's last stderr lines runShowingTail puts into its error.
const tailLines = 15

// runShowingTail runs a command with its stderr lines passed to out (indented), and on failure returns an
// error that ends with its last stderr lines, so the reason is in the error itself, not only scrolled past.
func runShowingTail(ctx context.Context, out io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = io.Discard, pw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to start %s: %w", name, err)
	}
	var last []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			_, _ = fmt.Fprintf(out, "    %s\n", sc.Text())
			if last = append(last, sc.Text()); len(last) > tailLines {
				last = last[1:]
			}
		}
	}()
	err := cmd.Wait()
	_ = pw.Close()
	<-done
	if err == nil {
		return nil
	}
	if len(last) == 0 {
		return fmt.Errorf("%w (no output)", err)
	}
	return fmt.Errorf("%w; its last lines:\n    %s", err, strings.Join(last, "\n    "))
}

// writeAccess writes what an operator needs: both kubeconfigs, the hosts' SSH key and known_hosts.
func writeAccess(ctx context.Context, dir string, s *stack.Stack, st *State) error {
	st.ManagementKubeconfig = filepath.Join(dir, "management.kubeconfig")
	st.WorkloadKubeconfig = filepath.Join(dir, "workload.kubeconfig")
	files := map[string][]byte{
		st.ManagementKubeconfig: s.Management.AdminKubeconfig,
		st.WorkloadKubeconfig:   s.Workload.AdminKubeconfig,
	}
	cred := &corev1.Secret{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.HostNamespace, Name: "yonder-hosts-ssh"}, cred); err == nil {
		files[filepath.Join(dir, "id_ed25519")] = cred.Data["ssh-privatekey"]
	}
	var known strings.Builder
	for _, hs := range s.Hosts {
		for _, h := range hs {
			known.WriteString(h.Address.String() + " " + string(ssh.MarshalAuthorizedKey(h.HostKey)))
		}
	}
	files[filepath.Join(dir, "known_hosts")] = []byte(known.String())
	for p, data := range files {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return fmt.Errorf("failed to write %s: %w", p, err)
		}
	}
	return nil
}

// applyCluster generates the Cluster with the real clusterctl from the installed local repository, with
// only the variables the docs give a user (the registry's CA Secret and mirrors: nodes get their software
// from the node image of their version in the lab's registry), and creates it.
func applyCluster(ctx context.Context, s *stack.Stack, dir, namespace string, workers int) error {
	env := append([]string{"YONDER_CONTROL_PLANE_KUBECONFIG_SECRET=" + stack.WorkloadKubeconfigSecret}, s.TemplateEnv()...)
	// The provider is named: with --metal the management cluster has two infrastructure providers, and
	// clusterctl then has no default.
	manifest, err := s.Clusterctl(ctx, env, "generate", "cluster", ClusterName, "--infrastructure", "yonder-ssh", "--flavor", "ssh",
		"--kubernetes-version", stack.KubernetesVersion, "--worker-machine-count", strconv.Itoa(workers), "--target-namespace", namespace)
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifest)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("failed to decode the generated cluster: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return createAndRecord(ctx, s, objs, filepath.Join(dir, "cluster.yaml"))
}

// createAndRecord creates objs in the management cluster (retrying while webhooks come up) and writes
// them to path, so the user can see exactly what the lab applied.
func createAndRecord(ctx context.Context, s *stack.Stack, objs []*unstructured.Unstructured, path string) error {
	var applied bytes.Buffer
	for _, u := range objs {
		data, _ := u.MarshalJSON()
		applied.WriteString("---\n")
		applied.Write(data)
		applied.WriteString("\n")
		if err := createRetrying(ctx, s.Client, u); err != nil {
			return fmt.Errorf("failed to create %s %s (manager logs in %s): %w", u.GetKind(), u.GetName(), s.Logs(), err)
		}
	}
	if err := os.WriteFile(path, applied.Bytes(), 0o600); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	return nil
}

// createRetrying creates u, retrying while an admission webhook cannot be reached: a manager whose
// readiness probe passed may still be opening its webhook port, and a restarted one needs a moment.
func createRetrying(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = c.Create(ctx, u.DeepCopy())
		if last == nil {
			return true, nil
		}
		if apierrors.IsInternalError(last) && strings.Contains(last.Error(), "failed calling webhook") {
			return false, nil
		}
		return false, last
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// waitForNodes waits until want Nodes are Ready and their Machines span wantSites failure domains,
// printing progress whenever it changes.
func waitForNodes(ctx context.Context, s *stack.Stack, namespace string, want, wantSites int, timeout time.Duration, step func(string, ...any)) error {
	last := ""
	err := stack.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		ms := &clusterv1.MachineList{}
		if err := s.Client.List(ctx, ms, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: ClusterName}); err != nil {
			return false, nil //nolint:nilerr // transient: keep waiting
		}
		nodes := &corev1.NodeList{}
		if err := s.WorkloadClient.List(ctx, nodes); err != nil {
			return false, nil //nolint:nilerr // transient: keep waiting
		}
		ready := map[string]bool{}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready[n.Name] = true
				}
			}
		}
		phases := map[string]int{}
		sites := map[string]bool{}
		readyMachines := 0
		for _, m := range ms.Items {
			phases[m.Status.Phase]++
			if m.Status.NodeRef.IsDefined() && ready[m.Status.NodeRef.Name] {
				readyMachines++
				sites[siteOf(s, m)] = true
			}
		}
		msg := fmt.Sprintf("Machines %v; %d/%d Nodes Ready at %d/%d sites", phases, readyMachines, want, len(sites), wantSites)
		if msg != last {
			step("%s", msg)
			last = msg
		}
		return readyMachines >= want && len(sites) >= wantSites, nil
	})
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted while waiting for Ready workers: %w", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("workers did not become Ready in %s (manager logs in %s; `kubectl yonder describe cluster %s`): %w\n%s",
			timeout, s.Logs(), ClusterName, err, notReadyReport(context.WithoutCancel(ctx), s, namespace))
	}
	return nil
}

// notReadyReport says why Machines have no Ready Node: each one's phase and conditions, its infrastructure
// machine's conditions, and the infrastructure manager's last log lines about it. The lab's directory may
// be gone by the time someone looks (a test's temporary directory), so the error carries the evidence.
func notReadyReport(ctx context.Context, s *stack.Stack, namespace string) string {
	var b strings.Builder
	ms := &clusterv1.MachineList{}
	if err := s.Client.List(ctx, ms, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: ClusterName}); err != nil {
		return fmt.Sprintf("(listing Machines failed: %v)", err)
	}
	for _, m := range ms.Items {
		if m.Status.NodeRef.IsDefined() && conditions.IsTrue(&m, clusterv1.MachineNodeHealthyCondition) {
			continue
		}
		fmt.Fprintf(&b, "Machine %s: phase %s, providerID %q\n", m.Name, m.Status.Phase, m.Spec.ProviderID)
		for _, c := range m.Status.Conditions {
			if c.Status != metav1.ConditionTrue {
				fmt.Fprintf(&b, "  condition %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
			}
		}
		ref := m.Spec.InfrastructureRef
		infra := &unstructured.Unstructured{}
		infra.SetAPIVersion(ref.APIGroup + "/v1alpha1")
		infra.SetKind(ref.Kind)
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, infra); err == nil {
			conds, _, _ := unstructured.NestedSlice(infra.Object, "status", "conditions")
			for _, c := range conds {
				if cm, ok := c.(map[string]any); ok && cm["status"] != "True" {
					fmt.Fprintf(&b, "  %s condition %v=%v %v: %v\n", ref.Kind, cm["type"], cm["status"], cm["reason"], cm["message"])
				}
			}
			// A failed SSH bootstrap records the end of its output: what failed on the host.
			if tail, _, _ := unstructured.NestedString(infra.Object, "status", "bootstrap", "outputTail"); tail != "" {
				fmt.Fprintf(&b, "  bootstrap output (last lines):\n    %s\n", strings.ReplaceAll(strings.TrimSpace(tail), "\n", "\n    "))
			}
		}
		for _, line := range logLinesAbout(filepath.Join(s.Logs(), "infrastructure-yonder-ssh.log"), ref.Name, 15) {
			fmt.Fprintf(&b, "  log: %s\n", line)
		}
	}
	return b.String()
}

// logLinesAbout returns the last limit lines of the log file that mention name (nil if it cannot be read).
func logLinesAbout(path, name string, limit int) []string {
	data, err := os.ReadFile(path) //nolint:gosec // the stack's own log file
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, name) {
			if len(l) > 400 {
				l = l[:400] + "…"
			}
			out = append(out, l)
		}
	}
	return out[max(0, len(out)-limit):]
}

// siteOf is the site of the host a Machine runs on: its providerID is yonder-ssh://<namespace>/<host>.
func siteOf(s *stack.Stack, m clusterv1.Machine) string {
	host := m.Spec.ProviderID[strings.LastIndex(m.Spec.ProviderID, "/")+1:]
	for site, hs := range s.Hosts {
		for _, h := range hs {
			if h.Name == host {
				return site
			}
		}
	}
	return m.Spec.FailureDomain
}

func printNext(out io.Writer, l *Options, st *State) {
	_, _ = fmt.Fprintf(out, `
Kubeconfigs:
  management (CAPI, Yonder's providers, the Cluster):  %[1]s
  workload   (the Nodes):                             %[2]s
Hosts: %[3]d (with gateways) at %[4]d sites on bridges %[5]s (management: %[6]s); SSH: ssh -i %[7]s/id_ed25519 -o UserKnownHostsFile=%[7]s/known_hosts root@%[8]s
Prometheus: %[10]s (scrapes every manager, yonder-net-controller and every Node's yonder-net-node; PromQL at /graph or /api/v1/query)

Next:
  export KUBECONFIG=%[1]s
  kubectl yonder describe cluster %[9]s
  kubectl yonder host list
  kubectl --kubeconfig %[2]s get nodes -o wide
  kubectl scale machinedeployment %[9]s-md-0 --replicas=<n>     # scale (hosts are claimed and released)
  kubectl --kubeconfig %[2]s delete node <node>                  # delete a node; watch MachineHealthCheck remediate:
  kubectl get machines -w
  kubectl yonder lab status                                       # live: the check pods' Nodes, whether the last check is stale
  kubectl yonder lab check                                        # the cross-site pod check again, on today's Nodes
  kubectl yonder lab down                                         # removes everything the lab created

`, st.ManagementKubeconfig, st.WorkloadKubeconfig, len(st.Hosts), l.Sites, strings.Join(st.Bridges, ","), st.Prefix, l.Dir, firstAddr(st), ClusterName, st.Prometheus)
}

func firstAddr(st *State) string {
	if len(st.Hosts) == 0 {
		return "<host>"
	}
	return st.Hosts[0].Address
}
