// Package yonderconfig reconciles YonderConfig: per Machine it creates a bootstrap token in the workload
// cluster, renders the bootstrap data Secret (cloud-init installing yonder-agent and writing its
// AgentConfig), refreshes the token until the Node joins, and deletes it once the Node exists.
package yonderconfig

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/bootstrap/internal/cloudinit"
	"github.com/yonder-dev/yonder/bootstrap/internal/token"
	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/condevents"
)

// +kubebuilder:rbac:groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigs;yonderconfigs/status;yonderconfigs/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=bootstrap.cluster.x-k8s.io,resources=yonderconfigtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;clusters/status;machines;machines/status,verbs=get;list;watch
// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=*,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler reconciles YonderConfig.
type Reconciler struct {
	// Client reads and writes the management cluster; Secrets are read live.
	Client client.Client
	// ClusterCache gives clients for workload clusters (built from "<cluster>-kubeconfig").
	ClusterCache clustercache.ClusterCache
	// WatchFilterValue limits reconciliation to objects labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilterValue string
	// DefaultAgent is used when spec.agent is empty (the manager's --agent-url/--agent-sha256); with only
	// a sha256, the agent is that blob in the image repository.
	DefaultAgent cloudinit.AgentSource
	// ImageRepository is the default of spec.images.repository (the manager's --image-repository): where
	// node images (<repository>/yonder-node:<version>) and the agent come from.
	ImageRepository string
	// TokenCheckInterval is how often a not-yet-joined Machine's token is checked (default: a third of its TTL).
	TokenCheckInterval time.Duration
	// RetryInterval is how soon a configuration problem without events (a missing Secret referenced by
	// spec.files) is checked again (default 30s).
	RetryInterval time.Duration
	// Now is the clock (tests may set it).
	Now func() time.Time
	// Recorder records Events on YonderConfigs (observe.go); SetupWithManager sets the manager's.
	Recorder record.EventRecorder
	// APIReader reads YonderConfigs past the cache where a step must happen once per bootstrap (counting
	// how it ended); SetupWithManager sets the manager's.
	APIReader client.Reader
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.ClusterCache == nil {
		return errors.New("the YonderConfig reconciler needs a Client and a ClusterCache")
	}
	if r.RetryInterval == 0 {
		r.RetryInterval = 30 * time.Second
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("yonder-bootstrap-manager") //nolint:staticcheck // core/v1 Events, as CAPI's controllers record them.
	}
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "yonderconfig")
	err := ctrl.NewControllerManagedBy(mgr).
		For(&bootstrapv1.YonderConfig{}, builder.WithPredicates(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue))).
		Named("yonderconfig").
		WithOptions(options).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToConfig),
			builder.WithPredicates(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue))).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterToConfigs),
			builder.WithPredicates(predicates.All(mgr.GetScheme(), log,
				predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue),
				predicates.Any(mgr.GetScheme(), log,
					predicates.ClusterPausedTransitions(mgr.GetScheme(), log),
					controlPlaneInitializedSet(),
				)))).
		WatchesRawSource(r.ClusterCache.GetClusterSource("yonderconfig", r.clusterToConfigs)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up the YonderConfig reconciler: %w", err)
	}
	return nil
}

// controlPlaneInitializedSet passes Cluster updates where status.initialization.controlPlaneInitialized becomes
// true. CAPI's ClusterControlPlaneInitialized predicate watches the condition instead, and CAPI's patch helper
// writes conditions before the rest of the status: a reconcile triggered by the condition can still read the
// field as false, and no later event would pass that predicate — the Machine would wait forever.
func controlPlaneInitializedSet() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldCluster, okOld := e.ObjectOld.(*clusterv1.Cluster)
			newCluster, okNew := e.ObjectNew.(*clusterv1.Cluster)
			return okOld && okNew &&
				!ptr.Deref(oldCluster.Status.Initialization.ControlPlaneInitialized, false) &&
				ptr.Deref(newCluster.Status.Initialization.ControlPlaneInitialized, false)
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func isOurs(ref clusterv1.ContractVersionedObjectReference) bool {
	return ref.APIGroup == bootstrapv1.GroupVersion.Group && ref.Kind == "YonderConfig"
}

func machineToConfig(_ context.Context, o client.Object) []ctrl.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok || !isOurs(m.Spec.Bootstrap.ConfigRef) {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}}}
}

func (r *Reconciler) clusterToConfigs(ctx context.Context, o client.Object) []ctrl.Request {
	machines := &clusterv1.MachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetName()}); err != nil {
		return nil
	}
	var reqs []ctrl.Request
	for i := range machines.Items {
		reqs = append(reqs, machineToConfig(ctx, &machines.Items[i])...)
	}
	return reqs
}

// scope is what one reconciliation works on.
type scope struct {
	config  *bootstrapv1.YonderConfig
	machine *clusterv1.Machine
	cluster *clusterv1.Cluster
}

// Reconcile brings one YonderConfig's data Secret and bootstrap token up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	cfg := &bootstrapv1.YonderConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, cfg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, cfg.ObjectMeta)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("failed to get owner Machine of %s: %w", klog.KObj(cfg), err)
	}
	if machine == nil {
		if !cfg.DeletionTimestamp.IsZero() {
			// The Machine is gone: nothing can be looked up any more; let the object go.
			return ctrl.Result{}, r.dropFinalizer(ctx, cfg)
		}
		// CAPI sets the owner reference; that update brings us back.
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", klog.KObj(machine))
	cluster, err := util.GetClusterByName(ctx, r.Client, machine.Namespace, machine.Spec.ClusterName)
	if err != nil {
		if apierrors.IsNotFound(err) && !cfg.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, r.dropFinalizer(ctx, cfg)
		}
		return ctrl.Result{}, fmt.Errorf("failed to get Cluster %s/%s: %w", machine.Namespace, machine.Spec.ClusterName, err)
	}
	log = log.WithValues("Cluster", klog.KObj(cluster))
	ctx = ctrl.LoggerInto(ctx, log)

	if cfg.DeletionTimestamp.IsZero() {
		if added, err := finalizers.EnsureFinalizer(ctx, r.Client, cfg, bootstrapv1.ConfigFinalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, cfg); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	h, err := patch.NewHelper(cfg, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := slices.Clone(cfg.Status.Conditions)
	defer func() {
		if err := r.patch(ctx, h, cfg); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, err})
			return
		}
		condevents.Record(r.recorder(), cfg, configConditionEvents, before, cfg.Status.Conditions)
	}()
	s := &scope{config: cfg, machine: machine, cluster: cluster}
	if !cfg.DeletionTimestamp.IsZero() {
		r.reconcileDelete(ctx, s)
		return ctrl.Result{}, nil
	}
	return r.reconcileNormal(ctx, s)
}

func (r *Reconciler) dropFinalizer(ctx context.Context, cfg *bootstrapv1.YonderConfig) error {
	if !controllerutil.ContainsFinalizer(cfg, bootstrapv1.ConfigFinalizer) {
		return nil
	}
	before := cfg.DeepCopy()
	controllerutil.RemoveFinalizer(cfg, bootstrapv1.ConfigFinalizer)
	return r.Client.Patch(ctx, cfg, client.MergeFrom(before))
}

func (r *Reconciler) patch(ctx context.Context, h *patch.Helper, cfg *bootstrapv1.YonderConfig) error {
	if err := conditions.SetSummaryCondition(cfg, cfg, clusterv1.ReadyCondition, conditions.ForConditionTypes{
		bootstrapv1.YonderConfigDataSecretAvailableCondition,
	}); err != nil {
		return err
	}
	cfg.Status.ObservedGeneration = cfg.Generation
	return h.Patch(ctx, cfg, patch.WithOwnedConditions{Conditions: []string{
		clusterv1.ReadyCondition, clusterv1.PausedCondition,
		bootstrapv1.YonderConfigDataSecretAvailableCondition, bootstrapv1.YonderConfigBootstrapTokenReadyCondition,
	}})
}

func (r *Reconciler) ttl(cfg *bootstrapv1.YonderConfig) time.Duration {
	s := cfg.Spec.BootstrapToken.TTLSeconds
	if s == 0 {
		s = bootstrapv1.DefaultTokenTTLSeconds
	}
	return time.Duration(s) * time.Second
}

func (r *Reconciler) checkInterval(cfg *bootstrapv1.YonderConfig) time.Duration {
	if r.TokenCheckInterval > 0 {
		return r.TokenCheckInterval
	}
	return r.ttl(cfg) / 3
}

// reconcileDelete removes the Machine's token (best effort: it expires anyway) and the finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) {
	// Whether the bootstrap already ended is read live where possible: the cache may not show yet the
	// reason a reconcile just before the deletion recorded, and that end must not be counted twice.
	ended := s.config
	if r.APIReader != nil {
		if live := (&bootstrapv1.YonderConfig{}); r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.config), live) == nil {
			ended = live
		}
	}
	bootstrapEndedOnDelete(ended)
	if id := r.tokenID(ctx, s.config); id != "" {
		if wl, err := r.ClusterCache.GetUncachedClient(ctx, client.ObjectKeyFromObject(s.cluster)); err == nil {
			if err := token.Delete(ctx, wl, id); err != nil {
				ctrl.LoggerFrom(ctx).Info("Leaving the bootstrap token to expire", "tokenID", id, "reason", err.Error())
			}
		}
	}
	controllerutil.RemoveFinalizer(s.config, bootstrapv1.ConfigFinalizer)
}

// tokenID reads the token id recorded on the data Secret ("" when there is none).
func (r *Reconciler) tokenID(ctx context.Context, cfg *bootstrapv1.YonderConfig) string {
	sec := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: cfg.Name}, sec); err != nil {
		return ""
	}
	return sec.Annotations[bootstrapv1.TokenIDAnnotation]
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	cfg := s.config
	data := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: cfg.Name}, data)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("failed to get data Secret %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	exists := err == nil

	if exists {
		// Status is rebuilt from the Secret (clusterctl move does not carry status).
		r.markDataSecretCreated(cfg)
		if s.machine.Status.NodeRef.IsDefined() {
			return r.removeToken(ctx, s, data)
		}
	}
	if !ptr.Deref(s.cluster.Status.Initialization.ControlPlaneInitialized, false) {
		if !exists {
			conditions.Set(cfg, metav1.Condition{Type: bootstrapv1.YonderConfigDataSecretAvailableCondition, Status: metav1.ConditionFalse,
				Reason: clusterv1.WaitingForControlPlaneInitializedReason, Message: "Waiting for the Cluster's control plane to be initialized"})
		}
		return ctrl.Result{}, nil
	}
	wl, err := r.ClusterCache.GetUncachedClient(ctx, client.ObjectKeyFromObject(s.cluster))
	if err != nil {
		if errors.Is(err, clustercache.ErrClusterNotConnected) {
			log.V(4).Info("Waiting for the connection to the workload cluster")
			if !exists {
				conditions.Set(cfg, metav1.Condition{Type: bootstrapv1.YonderConfigDataSecretAvailableCondition, Status: metav1.ConditionFalse,
					Reason: bootstrapv1.YonderConfigWaitingForClusterConnectionReason, Message: "Waiting for the connection to the workload cluster"})
			}
			// The ClusterCache source enqueues us when the connection comes up.
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !exists {
		return r.createData(ctx, s, wl)
	}
	return r.refreshToken(ctx, s, wl, data)
}

func (r *Reconciler) markDataSecretCreated(cfg *bootstrapv1.YonderConfig) {
	cfg.Status.DataSecretName = cfg.Name
	cfg.Status.Initialization.DataSecretCreated = ptr.To(true)
	conditions.Set(cfg, metav1.Condition{Type: bootstrapv1.YonderConfigDataSecretAvailableCondition, Status: metav1.ConditionTrue, Reason: bootstrapv1.YonderConfigDataSecretAvailableReason})
}

// configError is a problem in the spec or the Cluster an operator has to fix.
type configError struct{ reason, message string }

func (e *configError) Error() string { return e.message }

// createData creates the token, then the data Secret. A crash in between leaves an orphan token that
// expires on its own; it is never reused, since its value was not recorded.
func (r *Reconciler) createData(ctx context.Context, s *scope, wl client.Client) (ctrl.Result, error) {
	agentCfg, agent, err := r.agentConfig(ctx, s)
	if err != nil {
		return r.configProblem(s.config, err)
	}
	tok, err := token.Create(ctx, wl, klog.KObj(s.config).String(), r.ttl(s.config), r.Now())
	if err != nil {
		conditions.Set(s.config, metav1.Condition{Type: bootstrapv1.YonderConfigBootstrapTokenReadyCondition, Status: metav1.ConditionFalse, Reason: bootstrapv1.YonderConfigBootstrapTokenFailedReason, Message: err.Error()})
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Created bootstrap token", "tokenID", tok.ID, "expires", tok.Expires)
	agentCfg.BootstrapToken = tok.Value()
	if err := r.writeData(ctx, s, agentCfg, agent, tok.ID); err != nil {
		return ctrl.Result{}, err
	}
	r.markDataSecretCreated(s.config)
	r.markTokenValid(s.config, tok.Expires)
	r.tokenCreated(s, tok.ID, tok.Expires)
	return ctrl.Result{RequeueAfter: r.checkInterval(s.config)}, nil
}

func (r *Reconciler) configProblem(cfg *bootstrapv1.YonderConfig, err error) (ctrl.Result, error) {
	var cerr *configError
	if !errors.As(err, &cerr) {
		return ctrl.Result{}, err
	}
	conditions.Set(cfg, metav1.Condition{Type: bootstrapv1.YonderConfigDataSecretAvailableCondition, Status: metav1.ConditionFalse, Reason: cerr.reason, Message: cerr.message})
	return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
}

func (r *Reconciler) markTokenValid(cfg *bootstrapv1.YonderConfig, exp time.Time) {
	conditions.Set(cfg, metav1.Condition{Type: bootstrapv1.YonderConfigBootstrapTokenReadyCondition, Status: metav1.ConditionTrue, Reason: bootstrapv1.YonderConfigBootstrapTokenValidReason,
		Message: "Bootstrap token valid until " + exp.UTC().Format(time.RFC3339) + "; refreshed until the Node joins"})
}

// refreshToken keeps the Machine's token usable until its Node joins: a token close to expiry is
// extended; a token that is gone or already expired (tokencleaner deletes expired tokens) is replaced by a
// new one and the data Secret is rewritten, so a host that has not run the data yet gets a working token.
func (r *Reconciler) refreshToken(ctx context.Context, s *scope, wl client.Client, data *corev1.Secret) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	now := r.Now()
	ttl := r.ttl(s.config)
	id := data.Annotations[bootstrapv1.TokenIDAnnotation]
	if reason, msg := r.refreshStopped(s, data, now); reason != "" {
		return ctrl.Result{}, r.stopRefreshing(ctx, s, wl, id, reason, msg)
	}
	exp, found, err := time.Time{}, false, error(nil)
	if id != "" {
		if exp, found, err = token.Expiration(ctx, wl, id); err != nil {
			return ctrl.Result{}, err
		}
	}
	switch {
	case !found || !exp.After(now):
		agentCfg, agent, err := r.agentConfig(ctx, s)
		if err != nil {
			return r.configProblem(s.config, err)
		}
		tok, err := token.Create(ctx, wl, klog.KObj(s.config).String(), ttl, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		log.Info("Replaced an expired or missing bootstrap token", "oldTokenID", id, "tokenID", tok.ID)
		agentCfg.BootstrapToken = tok.Value()
		if err := r.writeData(ctx, s, agentCfg, agent, tok.ID); err != nil {
			return ctrl.Result{}, err
		}
		if id != "" {
			if err := token.Delete(ctx, wl, id); err != nil {
				return ctrl.Result{}, err
			}
		}
		tokens.WithLabelValues("replaced").Inc()
		r.recorder().Eventf(s.config, corev1.EventTypeNormal, BootstrapTokenReplacedEvent, "Replaced the expired or missing bootstrap token %q with %s and rewrote the data Secret", id, tok.ID)
		exp = tok.Expires
	case exp.Sub(now) < ttl/2:
		if exp, err = token.Extend(ctx, wl, id, ttl, now); err != nil {
			return ctrl.Result{}, err
		}
		tokens.WithLabelValues("extended").Inc()
		log.V(4).Info("Extended bootstrap token", "tokenID", id, "expires", exp)
	}
	r.markTokenValid(s.config, exp)
	return ctrl.Result{RequeueAfter: r.checkInterval(s.config)}, nil
}

// refreshWindow is how long a Machine's token is kept usable for its Node to join.
func (r *Reconciler) refreshWindow(cfg *bootstrapv1.YonderConfig) time.Duration {
	s := cfg.Spec.BootstrapToken.RefreshSeconds
	if s == 0 {
		s = bootstrapv1.DefaultTokenRefreshSeconds
	}
	return time.Duration(s) * time.Second
}

// refreshStopped says why the Machine's token must no longer be refreshed ("" while it may be): its
// refresh window (the data Secret's annotation; without one, its creation plus the window) has passed,
// or a MachineHealthCheck marked the Machine for remediation.
func (r *Reconciler) refreshStopped(s *scope, data *corev1.Secret, now time.Time) (string, string) {
	if conditions.Has(s.machine, clusterv1.MachineOwnerRemediatedCondition) {
		return bootstrapv1.YonderConfigBootstrapTokenMachineRemediatingReason,
			"The Machine is being remediated before its Node joined; its bootstrap token was deleted and is not renewed"
	}
	until := data.CreationTimestamp.Add(r.refreshWindow(s.config))
	if v, err := time.Parse(time.RFC3339, data.Annotations[bootstrapv1.TokenRefreshUntilAnnotation]); err == nil {
		until = v
	}
	if now.Before(until) {
		return "", ""
	}
	return bootstrapv1.YonderConfigBootstrapTokenRefreshWindowExpiredReason,
		fmt.Sprintf("The Node did not join before %s (spec.bootstrapToken.refreshSeconds); the bootstrap token was deleted and is not renewed: delete the Machine to try again", until.UTC().Format(time.RFC3339))
}

// stopRefreshing deletes the Machine's token (id; a token already gone is fine) and records why it is
// no longer refreshed. Nothing is requeued: a Machine or Node change brings the Machine back.
func (r *Reconciler) stopRefreshing(ctx context.Context, s *scope, wl client.Client, id, reason, msg string) error {
	if recorded, err := r.tokenReasonRecorded(ctx, s.config, reason); err != nil || recorded {
		return err
	}
	if id != "" {
		if err := token.Delete(ctx, wl, id); err != nil {
			return err
		}
	}
	ctrl.LoggerFrom(ctx).Info("Stopped refreshing the bootstrap token", "tokenID", id, "reason", reason)
	tokens.WithLabelValues("stopped").Inc()
	outcomes.WithLabelValues(stoppedOutcome(reason)).Inc()
	conditions.Set(s.config, metav1.Condition{Type: bootstrapv1.YonderConfigBootstrapTokenReadyCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	return nil
}

// tokenReasonRecorded says whether BootstrapTokenReady already has reason: the steps that end a bootstrap
// (deleting the token, counting the outcome) run once. The cached YonderConfig can predate the status write
// of the reconcile before this one (a Secret or Machine event requeues it at once), so a reason the cache
// does not show yet is looked up live; reconciles of one object never run at the same time.
func (r *Reconciler) tokenReasonRecorded(ctx context.Context, cfg *bootstrapv1.YonderConfig, reason string) (bool, error) {
	if conditions.GetReason(cfg, bootstrapv1.YonderConfigBootstrapTokenReadyCondition) == reason {
		return true, nil
	}
	if r.APIReader == nil {
		return false, nil
	}
	live := &bootstrapv1.YonderConfig{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cfg), live); err != nil {
		return false, fmt.Errorf("failed to read YonderConfig %s: %w", klog.KObj(cfg), err)
	}
	if conditions.GetReason(live, bootstrapv1.YonderConfigBootstrapTokenReadyCondition) != reason {
		return false, nil
	}
	// The patch at the end of this reconcile is computed against the stale copy: keep what the live one says.
	conditions.Set(cfg, *conditions.Get(live, bootstrapv1.YonderConfigBootstrapTokenReadyCondition))
	return true, nil
}

// removeToken deletes the token once the Machine's Node exists: a joined kubelet renews its own
// certificate and never needs the token again.
func (r *Reconciler) removeToken(ctx context.Context, s *scope, data *corev1.Secret) (ctrl.Result, error) {
	if recorded, err := r.tokenReasonRecorded(ctx, s.config, bootstrapv1.YonderConfigBootstrapTokenRemovedReason); err != nil || recorded {
		return ctrl.Result{}, err
	}
	wl, err := r.ClusterCache.GetUncachedClient(ctx, client.ObjectKeyFromObject(s.cluster))
	if err != nil {
		if errors.Is(err, clustercache.ErrClusterNotConnected) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if id := data.Annotations[bootstrapv1.TokenIDAnnotation]; id != "" {
		if err := token.Delete(ctx, wl, id); err != nil {
			return ctrl.Result{}, err
		}
		ctrl.LoggerFrom(ctx).Info("Deleted bootstrap token, the Node joined", "tokenID", id, "Node", s.machine.Status.NodeRef.Name)
		tokens.WithLabelValues("deleted").Inc()
		r.recorder().Eventf(s.config, corev1.EventTypeNormal, BootstrapTokenDeletedEvent, "Node %s joined; deleted its bootstrap token %s", s.machine.Status.NodeRef.Name, id)
	}
	r.nodeJoined(s)
	conditions.Set(s.config, metav1.Condition{Type: bootstrapv1.YonderConfigBootstrapTokenReadyCondition, Status: metav1.ConditionTrue, Reason: bootstrapv1.YonderConfigBootstrapTokenRemovedReason,
		Message: "Node " + s.machine.Status.NodeRef.Name + " joined; its bootstrap token was deleted"})
	return ctrl.Result{}, nil
}

// writeData creates or replaces the data Secret.
func (r *Reconciler) writeData(ctx context.Context, s *scope, agentCfg *agentv1.AgentConfig, agent cloudinit.AgentSource, tokenID string) error {
	value, err := cloudinit.Render(agentCfg, agent)
	if err != nil {
		return fmt.Errorf("failed to render bootstrap data for %s: %w", klog.KObj(s.config), err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.config.Namespace, Name: s.config.Name}}
	res, err := controllerutil.CreateOrPatch(ctx, r.Client, sec, func() error {
		if sec.Labels == nil {
			sec.Labels = map[string]string{}
		}
		sec.Labels[clusterv1.ClusterNameLabel] = s.cluster.Name
		if sec.Annotations == nil {
			sec.Annotations = map[string]string{}
		}
		sec.Annotations[bootstrapv1.TokenIDAnnotation] = tokenID
		if sec.Annotations[bootstrapv1.TokenRefreshUntilAnnotation] == "" {
			sec.Annotations[bootstrapv1.TokenRefreshUntilAnnotation] = r.Now().Add(r.refreshWindow(s.config)).UTC().Format(time.RFC3339)
		}
		sec.Type = clusterv1.ClusterSecretType
		sec.Data = map[string][]byte{"value": value, "format": []byte(bootstrapv1.DataSecretFormat)}
		return controllerutil.SetControllerReference(s.config, sec, r.Client.Scheme())
	})
	if err != nil {
		return fmt.Errorf("failed to write data Secret %s: %w", klog.KObj(sec), err)
	}
	ctrl.LoggerFrom(ctx).Info("Wrote bootstrap data Secret", "Secret", klog.KObj(sec), "operation", res)
	return nil
}

// agentConfig assembles the AgentConfig (without the token) and the agent source.
func (r *Reconciler) agentConfig(ctx context.Context, s *scope) (*agentv1.AgentConfig, cloudinit.AgentSource, error) {
	spec := &s.config.Spec
	reg, err := r.registry(ctx, s.config)
	if err != nil {
		return nil, cloudinit.AgentSource{}, err
	}
	agent, err := r.agentSource(s.config, reg)
	if err != nil {
		return nil, agent, err
	}
	ep := s.cluster.Spec.ControlPlaneEndpoint
	if !ep.IsValid() {
		return nil, agent, &configError{bootstrapv1.YonderConfigInvalidConfigurationReason, "The Cluster has no spec.controlPlaneEndpoint yet"}
	}
	ca, err := r.clusterCA(ctx, s.cluster)
	if err != nil {
		return nil, agent, err
	}
	version, err := r.version(ctx, s)
	if err != nil {
		return nil, agent, err
	}
	c := &agentv1.AgentConfig{
		APIVersion:        agentv1.APIVersion,
		Kind:              agentv1.Kind,
		NodeName:          s.machine.Name,
		KubernetesVersion: version,
		APIServer:         agentv1.APIServer{Endpoint: "https://" + net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))), CACertificate: string(ca)},
		Labels:            spec.NodeLabels,
		Site:              spec.Site,
		GPU:               agentv1.GPU{Mode: agentv1.GPUMode(spec.GPU.Mode)},
		PreCommands:       spec.PreCommands,
		PostCommands:      spec.PostCommands,
	}
	if c.GPU.Mode == "" {
		c.GPU.Mode = agentv1.GPUModeNone
	}
	if err := r.nodeSoftware(ctx, s.config, reg, c); err != nil {
		return nil, agent, err
	}
	for _, t := range spec.NodeTaints {
		c.Taints = append(c.Taints, agentv1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	for _, a := range spec.KubeletExtraArgs {
		c.KubeletExtraArgs = append(c.KubeletExtraArgs, agentv1.Arg{Name: a.Name, Value: a.Value})
	}
	for _, a := range spec.Artifacts {
		c.Artifacts = append(c.Artifacts, agentv1.Artifact{Name: a.Name, URL: a.URL, Path: a.Path, SHA256: a.SHA256})
	}
	for _, f := range spec.Files {
		content := f.Content
		if f.ContentFrom != nil {
			sec := &corev1.Secret{}
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.config.Namespace, Name: f.ContentFrom.Name}, sec); err != nil {
				if apierrors.IsNotFound(err) {
					return nil, agent, &configError{bootstrapv1.YonderConfigInvalidConfigurationReason, fmt.Sprintf("Secret %s/%s for file %s does not exist", s.config.Namespace, f.ContentFrom.Name, f.Path)}
				}
				return nil, agent, err
			}
			v, ok := sec.Data[f.ContentFrom.Key]
			if !ok {
				return nil, agent, &configError{bootstrapv1.YonderConfigInvalidConfigurationReason, fmt.Sprintf("Secret %s/%s has no key %q for file %s", s.config.Namespace, f.ContentFrom.Name, f.ContentFrom.Key, f.Path)}
			}
			content = string(v)
		}
		c.Files = append(c.Files, agentv1.File{Path: f.Path, Content: content, Permissions: f.Permissions, Owner: f.Owner})
	}
	return c, agent, nil
}

// clusterCA is the CA the workload API server presents, taken from "<cluster>-kubeconfig" (which the
// control plane provider writes and keeps in sync).
func (r *Reconciler) clusterCA(ctx context.Context, cluster *clusterv1.Cluster) ([]byte, error) {
	data, err := kubeconfig.FromSecret(ctx, r.Client, client.ObjectKeyFromObject(cluster))
	if err != nil {
		return nil, &configError{bootstrapv1.YonderConfigInvalidConfigurationReason, fmt.Sprintf("Cannot read the Cluster's kubeconfig Secret: %v", err)}
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, &configError{bootstrapv1.YonderConfigInvalidConfigurationReason, fmt.Sprintf("The Cluster's kubeconfig does not parse: %v", err)}
	}
	if kctx, ok := cfg.Contexts[cfg.CurrentContext]; ok {
		if cl, ok := cfg.Clusters[kctx.Cluster]; ok && len(cl.CertificateAuthorityData) > 0 {
			return cl.CertificateAuthorityData, nil
		}
	}
	return nil, &configError{bootstrapv1.YonderConfigInvalidConfigurationReason, "The Cluster's kubeconfig has no certificate-authority-data for its current context; nodes need the CA to trust the API server"}
}

// version picks spec.version, else the Machine's version, else the control plane's status.version.
func (r *Reconciler) version(ctx context.Context, s *scope) (string, error) {
	if v := s.config.Spec.Version; v != "" {
		return v, nil
	}
	if v := s.machine.Spec.Version; v != "" {
		return v, nil
	}
	if s.cluster.Spec.ControlPlaneRef.IsDefined() {
		cp, err := external.GetObjectFromContractVersionedRef(ctx, r.Client, s.cluster.Spec.ControlPlaneRef, s.cluster.Namespace)
		if err != nil {
			return "", fmt.Errorf("failed to get the control plane of Cluster %s: %w", klog.KObj(s.cluster), err)
		}
		if v, _, _ := unstructured.NestedString(cp.Object, "status", "version"); v != "" {
			return v, nil
		}
	}
	return "", &configError{bootstrapv1.YonderConfigInvalidConfigurationReason, "No Kubernetes version: set spec.version or the Machine's spec.version (the control plane reports none)"}
}
