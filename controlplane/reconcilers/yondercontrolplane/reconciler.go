// Package yondercontrolplane reconciles YonderControlPlane: it validates the user's admin kubeconfig of
// an existing cluster, reports the cluster as an initialized, externally managed control plane, writes
// CAPI's "<cluster>-kubeconfig" and installs the RBAC nodes need to join.
package yondercontrolplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	"sigs.k8s.io/cluster-api/util/secret"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/condevents"
)

// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanes;yondercontrolplanes/status;yondercontrolplanes/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=yondercontrolplanetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;clusters/status,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler reconciles YonderControlPlane.
type Reconciler struct {
	// Client reads and writes the management cluster (Secrets are read live).
	Client client.Client
	// WatchFilterValue limits reconciliation to objects labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilterValue string
	// HealthCheckInterval is how often a healthy attached cluster is probed again (default 1m): an
	// external API server sends no events.
	HealthCheckInterval time.Duration
	// RetryInterval is how soon a failing or missing kubeconfig is checked again (default 20s).
	RetryInterval time.Duration
	// Timeout bounds each call to the attached cluster (default 10s).
	Timeout time.Duration
	// Recorder records Events on YonderControlPlanes (observe.go); the manager's, named after it.
	Recorder record.EventRecorder
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.HealthCheckInterval == 0 {
		r.HealthCheckInterval = time.Minute
	}
	if r.RetryInterval == 0 {
		r.RetryInterval = 20 * time.Second
	}
	if r.Timeout == 0 {
		r.Timeout = 10 * time.Second
	}
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "yondercontrolplane")
	err := ctrl.NewControllerManagedBy(mgr).
		For(&controlplanev1.YonderControlPlane{}, builder.WithPredicates(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue))).
		Named("yondercontrolplane").
		WithOptions(options).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterToControlPlane),
			builder.WithPredicates(predicates.All(mgr.GetScheme(), log,
				predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue),
				predicates.ClusterPausedTransitions(mgr.GetScheme(), log),
			))).
		// Only Secrets labelled with a cluster name are in the manager's cache; the reconciler labels the
		// source Secret, and "<cluster>-kubeconfig" carries the label.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretToControlPlanes)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up the YonderControlPlane reconciler: %w", err)
	}
	return nil
}

func (r *Reconciler) clusterToControlPlane(_ context.Context, o client.Object) []ctrl.Request {
	c, ok := o.(*clusterv1.Cluster)
	if !ok {
		return nil
	}
	ref := c.Spec.ControlPlaneRef
	if ref.APIGroup != controlplanev1.GroupVersion.Group || ref.Kind != "YonderControlPlane" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}}}
}

func (r *Reconciler) secretToControlPlanes(ctx context.Context, o client.Object) []ctrl.Request {
	list := &controlplanev1.YonderControlPlaneList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var reqs []ctrl.Request
	for i := range list.Items {
		cp := &list.Items[i]
		clusterName := cp.Labels[clusterv1.ClusterNameLabel]
		if clusterName == "" {
			continue
		}
		if o.GetName() == cp.KubeconfigSecretName(clusterName) || o.GetName() == secret.Name(clusterName, secret.Kubeconfig) {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cp)})
		}
	}
	return reqs
}

// Reconcile brings one YonderControlPlane's status and the Secrets it owns up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, rerr error) {
	cp := &controlplanev1.YonderControlPlane{}
	if err := r.Client.Get(ctx, req.NamespacedName, cp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster, err := util.GetOwnerCluster(ctx, r.Client, cp.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get owner Cluster of %s: %w", klog.KObj(cp), err)
	}
	if cluster == nil {
		// CAPI sets the owner reference; that update brings us back.
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KObj(cluster))
	ctx = ctrl.LoggerInto(ctx, log)

	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, cp); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	h, err := patch.NewHelper(cp, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	beforeConditions, beforeStatus := slices.Clone(cp.Status.Conditions), observe(cp)
	defer func() {
		if err := r.patch(ctx, h, cp); err != nil {
			rerr = kerrors.NewAggregate([]error{rerr, err})
			return
		}
		condevents.Record(r.recorder(), cp, controlPlaneConditionEvents, beforeConditions, cp.Status.Conditions)
		recordStatusEvents(r.recorder(), cp, beforeStatus)
	}()
	if !cp.DeletionTimestamp.IsZero() {
		// Nothing to undo: "<cluster>-kubeconfig" is garbage-collected through its owner reference, and the
		// join RBAC stays in the existing cluster, whose other nodes may rely on it (docs/controlplane.md).
		return ctrl.Result{}, nil
	}
	return r.reconcileNormal(ctx, cluster, cp)
}

func (r *Reconciler) patch(ctx context.Context, h *patch.Helper, cp *controlplanev1.YonderControlPlane) error {
	if err := conditions.SetSummaryCondition(cp, cp, clusterv1.ReadyCondition, conditions.ForConditionTypes{
		controlplanev1.YonderControlPlaneKubeconfigValidCondition, clusterv1.AvailableCondition, controlplanev1.YonderControlPlaneJoinRBACReadyCondition,
	}); err != nil {
		return err
	}
	cp.Status.ObservedGeneration = cp.Generation
	return h.Patch(ctx, cp, patch.WithOwnedConditions{Conditions: []string{
		clusterv1.ReadyCondition, clusterv1.PausedCondition,
		controlplanev1.YonderControlPlaneKubeconfigValidCondition, clusterv1.AvailableCondition, controlplanev1.YonderControlPlaneJoinRBACReadyCondition,
		controlplanev1.YonderControlPlaneVersionUpToDateCondition,
	}})
}

func (r *Reconciler) reconcileNormal(ctx context.Context, cluster *clusterv1.Cluster, cp *controlplanev1.YonderControlPlane) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	cp.Status.ExternalManagedControlPlane = ptr.To(true)

	data, cfg, err := r.readSourceKubeconfig(ctx, cluster, cp)
	if err != nil {
		var kerr *kubeconfigError
		if !errors.As(err, &kerr) {
			return ctrl.Result{}, err
		}
		r.markUnusable(cp, kerr.reason, kerr.message)
		// A Secret that does not exist yet carries no cluster-name label, so no event will announce it.
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}

	restCfg, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		r.markUnusable(cp, controlplanev1.YonderControlPlaneKubeconfigInvalidReason, fmt.Sprintf("The kubeconfig cannot build a client: %v", err))
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	restCfg = rest.CopyConfig(restCfg)
	restCfg.Timeout = r.Timeout
	restCfg.UserAgent = "yonder-controlplane-manager"
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to create a client for Cluster %s: %w", klog.KObj(cluster), err)
	}
	version, err := cs.Discovery().ServerVersion()
	if err != nil {
		reason, msg := controlplanev1.YonderControlPlaneKubeconfigUnreachableReason, fmt.Sprintf("The API server %s did not answer: %v", restCfg.Host, err)
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			reason, msg = controlplanev1.YonderControlPlaneKubeconfigUnauthorizedReason, fmt.Sprintf("The API server %s rejected the kubeconfig's credentials: %v; put a valid admin credential into the Secret", restCfg.Host, err)
		}
		log.Info("Probing the attached API server failed", "reason", reason)
		r.markUnusable(cp, reason, msg)
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneKubeconfigValidCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.YonderControlPlaneKubeconfigValidReason})
	conditions.Set(cp, metav1.Condition{Type: clusterv1.AvailableCondition, Status: metav1.ConditionTrue, Reason: clusterv1.AvailableReason,
		Message: fmt.Sprintf("API server %s reports %s", restCfg.Host, version.GitVersion)})
	running, err := releaseVersion(version.GitVersion)
	if err != nil {
		r.markUnusable(cp, controlplanev1.YonderControlPlaneKubeconfigUnreachableReason, fmt.Sprintf("The API server %s reports a version that is not semver: %v", restCfg.Host, err))
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	cp.Status.Version = running
	setVersionCondition(cp, running)
	if !ptr.Deref(cp.Status.Initialization.ControlPlaneInitialized, false) {
		log.Info("Marking the attached control plane initialized", "version", version.GitVersion)
		cp.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	}
	if !cp.Spec.ControlPlaneEndpoint.IsValid() {
		ep, err := endpointFromServer(restCfg.Host)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to derive the control plane endpoint from %q: %w", restCfg.Host, err)
		}
		cp.Spec.ControlPlaneEndpoint = ep
	}

	if err := r.writeClusterKubeconfig(ctx, cluster, cp, data); err != nil {
		return ctrl.Result{}, err
	}

	if err := applyJoinRBAC(ctx, cs); err != nil {
		conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneJoinRBACReadyCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.YonderControlPlaneJoinRBACFailedReason,
			Message: fmt.Sprintf("Installing the join RBAC failed: %v; the kubeconfig needs rights to create ClusterRoleBindings", err)})
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneJoinRBACReadyCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.YonderControlPlaneJoinRBACInstalledReason})
	return ctrl.Result{RequeueAfter: r.HealthCheckInterval}, nil
}

// markUnusable records why the kubeconfig cannot be used. controlPlaneInitialized stays as it was: CAPI
// treats initialization as a one-way fact.
func (r *Reconciler) markUnusable(cp *controlplanev1.YonderControlPlane, reason, msg string) {
	conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneKubeconfigValidCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	conditions.Set(cp, metav1.Condition{Type: clusterv1.AvailableCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotAvailableReason,
		Message: "The attached cluster cannot be reached with the given kubeconfig (see KubeconfigValid)"})
	if !conditions.Has(cp, controlplanev1.YonderControlPlaneVersionUpToDateCondition) {
		conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneVersionUpToDateCondition, Status: metav1.ConditionUnknown, Reason: controlplanev1.YonderControlPlaneVersionUnknownReason,
			Message: "Waiting for the attached API server to report its version"})
	}
	if !conditions.IsTrue(cp, controlplanev1.YonderControlPlaneJoinRBACReadyCondition) {
		conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneJoinRBACReadyCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.YonderControlPlaneJoinRBACWaitingForKubeconfigReason,
			Message: "Waiting for a valid kubeconfig"})
	}
}

// readSourceKubeconfig reads, labels and normalizes the user's kubeconfig Secret.
func (r *Reconciler) readSourceKubeconfig(ctx context.Context, cluster *clusterv1.Cluster, cp *controlplanev1.YonderControlPlane) ([]byte, *clientcmdapi.Config, error) {
	name, key := cp.KubeconfigSecretName(cluster.Name), cp.KubeconfigSecretKey()
	s := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cp.Namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigSecretNotFoundReason,
				fmt.Sprintf("Secret %s/%s does not exist; create it with an admin kubeconfig of the existing cluster under key %q", cp.Namespace, name, key)}
		}
		return nil, nil, fmt.Errorf("failed to get Secret %s/%s: %w", cp.Namespace, name, err)
	}
	other := owningCluster(s, cluster.Name)
	if other != "" {
		// A Cluster that is gone no longer holds its source Secret: the label stays behind when a Cluster
		// is deleted (the Secret is the user's), and the next Cluster may take it over.
		switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: cp.Namespace, Name: other}, &clusterv1.Cluster{}); {
		case apierrors.IsNotFound(err):
			other = ""
		case err != nil:
			return nil, nil, fmt.Errorf("failed to get Cluster %s/%s, which Secret %s names: %w", cp.Namespace, other, name, err)
		}
	}
	if other != "" {
		// Another Cluster's Secret (its kubeconfig, or a source another control plane uses): reading it
		// would hand this Cluster that cluster's credentials, relabelling it would take it away.
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigSecretForeignReason,
			fmt.Sprintf("Secret %s/%s belongs to Cluster %s; point spec.kubeconfigSecretRef at a Secret of Cluster %s (unlabelled, or labelled %s=%s)",
				cp.Namespace, name, other, cluster.Name, clusterv1.ClusterNameLabel, cluster.Name)}
	}
	// The labels let the manager watch the Secret (only Secrets with a cluster name are cached) and let
	// clusterctl move carry it, since nothing owns it.
	if s.Labels[clusterv1.ClusterNameLabel] != cluster.Name || !hasKey(s.Labels, clusterctlv1.ClusterctlMoveLabel) {
		before := s.DeepCopy()
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[clusterv1.ClusterNameLabel] = cluster.Name
		s.Labels[clusterctlv1.ClusterctlMoveLabel] = ""
		if err := r.Client.Patch(ctx, s, client.MergeFrom(before)); err != nil {
			return nil, nil, fmt.Errorf("failed to label Secret %s: %w", klog.KObj(s), err)
		}
	}
	raw, ok := s.Data[key]
	if !ok || len(raw) == 0 {
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigKeyNotFoundReason, fmt.Sprintf("Secret %s/%s has no data under key %q", cp.Namespace, name, key)}
	}
	return normalizeKubeconfig(cluster.Name, raw)
}

// owningCluster returns the Cluster other than cluster that Secret s belongs to — by its cluster-name
// label or an owner reference to a Cluster — or "" when s is this Cluster's or nobody's.
func owningCluster(s *corev1.Secret, cluster string) string {
	if l := s.Labels[clusterv1.ClusterNameLabel]; l != "" && l != cluster {
		return l
	}
	for _, o := range s.OwnerReferences {
		if o.Kind == "Cluster" && strings.HasPrefix(o.APIVersion, clusterv1.GroupVersion.Group+"/") && o.Name != cluster {
			return o.Name
		}
	}
	return ""
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// writeClusterKubeconfig creates or updates "<cluster>-kubeconfig" in CAPI's format, controlled by the
// YonderControlPlane.
func (r *Reconciler) writeClusterKubeconfig(ctx context.Context, cluster *clusterv1.Cluster, cp *controlplanev1.YonderControlPlane, data []byte) error {
	owner := metav1.OwnerReference{
		APIVersion: controlplanev1.GroupVersion.String(), Kind: "YonderControlPlane", Name: cp.Name, UID: cp.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
	desired := kubeconfig.GenerateSecretWithOwner(client.ObjectKeyFromObject(cluster), data, owner)
	existing := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		ctrl.LoggerFrom(ctx).Info("Creating the cluster kubeconfig Secret", "Secret", klog.KObj(desired))
		if err := r.Client.Create(ctx, desired); err != nil {
			return fmt.Errorf("failed to create Secret %s: %w", klog.KObj(desired), err)
		}
		r.kubeconfigSecretWritten(cp, desired, true)
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to get Secret %s: %w", klog.KObj(desired), err)
	}
	if bytes.Equal(existing.Data[secret.KubeconfigDataName], data) && existing.Labels[clusterv1.ClusterNameLabel] == cluster.Name &&
		util.HasOwnerRef(existing.OwnerReferences, owner) {
		return nil
	}
	before := existing.DeepCopy()
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	existing.Labels[clusterv1.ClusterNameLabel] = cluster.Name
	existing.Data = map[string][]byte{secret.KubeconfigDataName: data}
	existing.OwnerReferences = util.EnsureOwnerRef(existing.OwnerReferences, owner)
	ctrl.LoggerFrom(ctx).Info("Updating the cluster kubeconfig Secret", "Secret", klog.KObj(existing))
	if err := r.Client.Patch(ctx, existing, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("failed to update Secret %s: %w", klog.KObj(existing), err)
	}
	r.kubeconfigSecretWritten(cp, existing, false)
	return nil
}
