// Package apisync connects yonder-net-node to the API: it publishes the node's NodeNetwork (public key,
// endpoints, ports, protocols, underlay MTU; never the private key), reads the node's view of the route plan
// (its Node, its Site's RoutePlan, the PeerSlices it needs) into the daemon's input file, and reports the
// daemon's state in NodeNetwork.status. Writes happen only when something differs.
//
// With a Cache (informers, see NewCache) a sync runs when a watched object changes or the daemon's own state
// changes, not on a timer: a plan change reaches the node in one watch event, and an idle cluster costs no
// API requests.
package apisync

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// DaemonState is what the daemon reports for the status.
type DaemonState struct {
	// Applied is true when the last plan was applied without error.
	Applied bool
	Message string
	// Gateway is true when forwarding works on a gateway candidate (the daemon's own view).
	Gateway bool
	// Dataplane is what the daemon detected and uses (nil: not reported).
	Dataplane *netv1.NodeDataplaneStatus
}

// Syncer runs the API side of the daemon.
type Syncer struct {
	// Client writes (and reads, when Cache is nil).
	Client client.Client
	// Cache, when set, is where reads come from and whose watch events trigger syncs (see NewCache).
	Cache     cache.Cache
	Node      string
	InputFile string
	Spec      func() (netv1.NodeNetworkSpec, error)
	State     func() DaemonState
	// Interval is the polling period without a Cache; with one it is only a safety resync.
	Interval time.Duration
	// StateInterval is how often Spec and State are compared with what was last reported (local calls,
	// no API traffic); default 500 ms.
	StateInterval time.Duration
	Log           *slog.Logger

	// Writes counts API writes (create/update/status), for tests.
	Writes   int
	lastIn   []byte
	reported any
}

// NewCache returns informers for what a node's daemon reads: its own Node and NodeNetwork (field selector on
// the name, so a node never caches other nodes), RoutePlans and PeerSlices. The caller starts it
// (go c.Start(ctx)) before Syncer.Run, which waits for it to sync.
func NewCache(cfg *rest.Config, scheme *runtime.Scheme, node string) (cache.Cache, error) {
	own := fields.OneTermEqualSelector("metadata.name", node)
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.Node{}:       {Field: own},
		&netv1.NodeNetwork{}: {Field: own},
		&netv1.RoutePlan{}:   {},
		&netv1.PeerSlice{}:   {},
	}})
	if err != nil {
		return nil, fmt.Errorf("failed to create the API cache: %w", err)
	}
	return c, nil
}

func (s *Syncer) reader() client.Reader {
	if s.Cache != nil {
		return s.Cache
	}
	return s.Client
}

// Run syncs until ctx ends: on every watch event of the Cache and whenever the daemon's publication or state
// changes, else every Interval (without a Cache that is the only trigger).
func (s *Syncer) Run(ctx context.Context) error {
	kick := make(chan struct{}, 1)
	trigger := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if s.Cache != nil {
		h := toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { trigger() },
			UpdateFunc: func(any, any) { trigger() },
			DeleteFunc: func(any) { trigger() },
		}
		for _, o := range []client.Object{&corev1.Node{}, &netv1.NodeNetwork{}, &netv1.RoutePlan{}, &netv1.PeerSlice{}} {
			inf, err := s.Cache.GetInformer(ctx, o)
			if err != nil {
				return fmt.Errorf("failed to watch %T: %w", o, err)
			}
			if _, err := inf.AddEventHandler(h); err != nil {
				return fmt.Errorf("failed to watch %T: %w", o, err)
			}
		}
		if !s.Cache.WaitForCacheSync(ctx) {
			return nil // ctx ended
		}
	}
	every := s.StateInterval
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	local := time.NewTicker(every)
	defer local.Stop()
	resync := time.NewTicker(s.Interval)
	defer resync.Stop()
	for {
		if err := s.SyncOnce(ctx); err != nil {
			s.Log.Error("Syncing with the API", "err", err)
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-kick:
				break wait
			case <-resync.C:
				break wait
			case <-local.C:
				// The daemon applied a plan or its key/endpoints changed: report it now rather than at
				// the next watch event.
				if !reflect.DeepEqual(s.localState(), s.reported) {
					break wait
				}
			}
		}
	}
}

// localState is what the daemon would report now (Spec's error counts as a change too).
func (s *Syncer) localState() any {
	spec, err := s.Spec()
	return []any{spec, fmt.Sprint(err), s.State()}
}

// SyncOnce publishes, reads the plan and reports status once.
func (s *Syncer) SyncOnce(ctx context.Context) error {
	s.reported = s.localState()
	node := &corev1.Node{}
	if err := s.reader().Get(ctx, client.ObjectKey{Name: s.Node}, node); err != nil {
		return fmt.Errorf("failed to get Node %s: %w", s.Node, err)
	}
	nn, err := s.publish(ctx, node)
	if err != nil || nn == nil {
		return err
	}
	site := node.Labels[netv1.SiteLabel]
	podCIDRs := node.Spec.PodCIDRs
	if len(podCIDRs) == 0 && node.Spec.PodCIDR != "" {
		podCIDRs = []string{node.Spec.PodCIDR}
	}
	if site == "" || len(podCIDRs) == 0 {
		return nil // the controller has not assigned the node yet
	}
	plan := &netv1.RoutePlan{}
	if err := s.reader().Get(ctx, client.ObjectKey{Name: site}, plan); err != nil {
		return client.IgnoreNotFound(err)
	}
	in := desired.Input{Node: s.Node, Site: site, PodCIDRs: podCIDRs, Plan: plan.Spec}
	slices, err := s.slices(ctx, client.MatchingLabels{netv1.SiteLabel: site})
	if err != nil {
		return err
	}
	in.Slices = append(in.Slices, slices...)
	for _, sel := range RemoteSlices(plan.Spec) {
		more, err := s.slices(ctx, sel)
		if err != nil {
			return err
		}
		in.Slices = append(in.Slices, more...)
	}
	b, err := yaml.Marshal(in)
	if err != nil {
		return fmt.Errorf("failed to encode input: %w", err)
	}
	if !bytes.Equal(b, s.lastIn) {
		if err := os.MkdirAll(filepath.Dir(s.InputFile), 0o750); err != nil {
			return fmt.Errorf("failed to create directory of %s: %w", s.InputFile, err)
		}
		if err := os.WriteFile(s.InputFile+".tmp", b, 0o600); err != nil {
			return fmt.Errorf("failed to write input: %w", err)
		}
		if err := os.Rename(s.InputFile+".tmp", s.InputFile); err != nil {
			return fmt.Errorf("failed to write input: %w", err)
		}
		s.lastIn = b
	}
	return s.status(ctx, nn, plan.Generation, isCandidate(in))
}

// RemoteSlices select the remote PeerSlices a node needs for its Site's links: a remote Site's gateway
// slices for Gateway links (all its slices when it has no gateways, or for Direct links) and, for Relayed
// links, the relay Site's gateway slices. Each Site's slices are read once.
func RemoteSlices(plan netv1.RoutePlanSpec) []client.MatchingLabels {
	all, gateways := map[string]bool{}, map[string]bool{}
	for _, l := range plan.Links {
		if l.Mode == netv1.LinkModeGateway && !l.RemoteSelfGateway {
			gateways[l.Site] = true
		} else {
			all[l.Site] = true
		}
		if l.Relay != nil {
			gateways[l.Relay.Site] = true
		}
	}
	var out []client.MatchingLabels
	for _, site := range sortedKeys(all) {
		out = append(out, client.MatchingLabels{netv1.SiteLabel: site})
	}
	for _, site := range sortedKeys(gateways) {
		if !all[site] {
			out = append(out, client.MatchingLabels{netv1.SiteLabel: site, netv1.SliceRoleLabel: "gateways"})
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isCandidate(in desired.Input) bool {
	for _, sl := range in.Slices {
		if sl.Site != in.Site {
			continue
		}
		for _, p := range sl.Peers {
			if p.Node == in.Node && p.Gateway != nil {
				return true
			}
		}
	}
	return false
}

func (s *Syncer) slices(ctx context.Context, sel client.MatchingLabels) ([]netv1.PeerSliceSpec, error) {
	l := &netv1.PeerSliceList{}
	if err := s.reader().List(ctx, l, sel); err != nil {
		return nil, fmt.Errorf("failed to list PeerSlices %v: %w", sel, err)
	}
	out := make([]netv1.PeerSliceSpec, 0, len(l.Items))
	for _, it := range l.Items {
		out = append(out, it.Spec)
	}
	return out, nil
}

func (s *Syncer) publish(ctx context.Context, node *corev1.Node) (*netv1.NodeNetwork, error) {
	spec, err := s.Spec()
	if err != nil {
		return nil, err
	}
	nn := &netv1.NodeNetwork{}
	err = s.reader().Get(ctx, client.ObjectKey{Name: s.Node}, nn)
	if apierrors.IsNotFound(err) {
		nn = &netv1.NodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: s.Node,
			// Deleted with its Node.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: spec}
		if err := s.Client.Create(ctx, nn); err != nil {
			if apierrors.IsAlreadyExists(err) && s.Cache != nil {
				// The cache has not seen our own create yet; its watch event brings the next sync.
				return nil, nil
			}
			return nil, fmt.Errorf("failed to create NodeNetwork %s: %w", s.Node, err)
		}
		s.Writes++
		s.Log.Info("Published NodeNetwork", "NodeNetwork", s.Node, "publicKey", spec.PublicKey)
		return nn, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to get NodeNetwork %s: %w", s.Node, err)
	}
	if reflect.DeepEqual(nn.Spec, spec) {
		return nn, nil
	}
	s.Log.Info("Updating NodeNetwork", "NodeNetwork", s.Node, "publicKey", spec.PublicKey)
	nn.Spec = spec
	if err := s.Client.Update(ctx, nn); err != nil {
		if apierrors.IsConflict(err) && s.Cache != nil {
			// A stale cached copy; the watch event of the newer one brings the next sync.
			return nil, nil
		}
		return nil, fmt.Errorf("failed to update NodeNetwork %s: %w", s.Node, err)
	}
	s.Writes++
	return nn, nil
}

func (s *Syncer) status(ctx context.Context, nn *netv1.NodeNetwork, planGen int64, candidate bool) error {
	st := s.State()
	next := nn.DeepCopy()
	ready := metav1.Condition{Type: netv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: netv1.ReadyReason, ObservedGeneration: nn.Generation}
	if !st.Applied {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "PlanNotApplied", st.Message
	} else {
		next.Status.ObservedPlanGeneration = planGen
	}
	meta.SetStatusCondition(&next.Status.Conditions, ready)
	if st.Dataplane != nil {
		next.Status.Dataplane = st.Dataplane
	}
	if candidate {
		gw := metav1.Condition{Type: netv1.NodeNetworkGatewayReadyCondition, Status: metav1.ConditionTrue, Reason: netv1.ReadyReason, ObservedGeneration: nn.Generation}
		if !st.Gateway {
			gw.Status, gw.Reason, gw.Message = metav1.ConditionFalse, "ForwardingNotReady", "The dataplane cannot forward for other nodes: see yonder-net-node debug"
		}
		meta.SetStatusCondition(&next.Status.Conditions, gw)
	} else {
		meta.RemoveStatusCondition(&next.Status.Conditions, netv1.NodeNetworkGatewayReadyCondition)
	}
	if reflect.DeepEqual(next.Status, nn.Status) {
		return nil
	}
	if err := s.Client.Status().Patch(ctx, next, client.MergeFrom(nn)); err != nil {
		return fmt.Errorf("failed to update NodeNetwork %s status: %w", s.Node, err)
	}
	s.Writes++
	return nil
}
