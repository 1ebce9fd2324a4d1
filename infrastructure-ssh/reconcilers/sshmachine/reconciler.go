// Package sshmachine reconciles YonderSSHMachines with the shared claim reconciler (pkg/claim) and this
// provider's adapter: claim a free YonderSSHHost (recorded on the host before any SSH work), run the
// Machine's cloud-init bootstrap data on it over SSH as a run tracked on the host, set providerID, and on
// delete clean the host and release it back to the inventory.
package sshmachine

import (
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostpool"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// ProviderIDPrefix starts every providerID of this provider.
const ProviderIDPrefix = "yonder-ssh://"

// SSHTimeout bounds the SSH work of one reconcile (cleanup commands included).
const SSHTimeout = 5 * time.Minute

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshmachines;yondersshmachines/status;yondersshmachines/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=yondersshhosts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Adapter is the SSH provider's part of the claim reconciler: the hand-off is the bootstrap run over
// SSH, the withdrawal the host's cleanup.
type Adapter struct {
	hostpool.Pool
	Client client.Client
	// Name is the manager's name (user agent towards workload clusters).
	Name string
	// SecretCache reads the Secrets the manager caches (those with a cluster name: bootstrap data); nil
	// reads every Secret from Client.
	SecretCache client.Reader
	// CredentialsCache reads the Secrets labelled infrav1.CredentialsLabel from a watch (setup builds it);
	// nil reads credentials through the memo.
	CredentialsCache client.Reader
	// Dialer opens SSH connections.
	Dialer sshexec.Dialer
	// PollInterval is the longest wait between checks of a running bootstrap (default 10s): the first
	// check comes after a tenth of it, then the wait doubles with the run's age (PollDelay).
	PollInterval time.Duration
	// RetryInterval is the first wait after an SSH failure; it doubles per attempt up to 5m (default 15s).
	RetryInterval time.Duration
	// CleanupRetries bounds cleanup attempts on delete before the operator must act (default 5).
	CleanupRetries int32
	// DefaultBootstrapTimeout applies when spec.bootstrapTimeout is empty (default 30m).
	DefaultBootstrapTimeout time.Duration

	// polls is when each running bootstrap is next checked (polls.go).
	polls pollSchedule
	// credentials are the credentials Secrets read a moment ago (credentials.go).
	credentials credentialsMemo
}

var _ claim.Adapter[*infrav1.YonderSSHMachine, *infrav1.YonderSSHHost] = &Adapter{}

// New returns the YonderSSHMachine reconciler: the claim reconciler with a as its adapter.
func New(c client.Client, apiReader client.Reader, watchFilterValue string, a *Adapter) *claim.Reconciler[*infrav1.YonderSSHMachine, *infrav1.YonderSSHHost] {
	a.Client = c
	a.defaults()
	return &claim.Reconciler[*infrav1.YonderSSHMachine, *infrav1.YonderSSHHost]{Client: c, APIReader: apiReader, WatchFilterValue: watchFilterValue, Adapter: a}
}

func (a *Adapter) defaults() {
	if a.PollInterval == 0 {
		a.PollInterval = 10 * time.Second
	}
	if a.RetryInterval == 0 {
		a.RetryInterval = 15 * time.Second
	}
	if a.CleanupRetries == 0 {
		a.CleanupRetries = 5
	}
	if a.DefaultBootstrapTimeout == 0 {
		a.DefaultBootstrapTimeout = 30 * time.Minute
	}
	if a.Dialer == nil {
		a.Dialer = sshexec.SSHDialer{}
	}
}

// Spec implements claim.Adapter. Only spec, label and annotation changes of hosts wake machines (claims,
// releases, keys); the host controller's frequent status writes would wake them for nothing.
func (a *Adapter) Spec() claim.Spec {
	return claim.Spec{
		MachineKind: hostpool.ConsumerKind, Finalizer: infrav1.MachineFinalizer, ControllerName: a.Name,
		Keys: claim.Keys{Host: infrav1.HostAnnotation, ReservedHost: infrav1.ReservedHostAnnotation, ClaimID: infrav1.ClaimIDAnnotation},
		Conditions: claim.Conditions{Claimed: infrav1.YonderSSHMachineHostClaimedCondition, Provisioned: infrav1.YonderSSHMachineBootstrapExecutedCondition, Released: infrav1.YonderSSHMachineHostCleanedCondition, HostLostReason: infrav1.YonderSSHMachineHostDeletedReason,
			Progress: []string{infrav1.YonderSSHMachineBootstrapRunningReason}, QuietProgress: true},
		NoHostHint: "a host is free once it has a pinned host key, no consumer and no " + infrav1.NeedsCleanupAnnotation +
			" annotation; register more hosts, or release or clean existing ones",
		HostPredicates: []predicate.Predicate{predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{})},
	}
}

// NewMachine implements claim.Adapter.
func (a *Adapter) NewMachine() *infrav1.YonderSSHMachine { return &infrav1.YonderSSHMachine{} }

// Facts implements claim.Adapter.
func (a *Adapter) Facts(m *infrav1.YonderSSHMachine) claim.Facts {
	return claim.Facts{HostSelector: m.Spec.HostSelector.LabelSelector(), Provisioned: ptr.Deref(m.Status.Initialization.Provisioned, false), ProviderID: m.Spec.ProviderID}
}

// RecordHost implements claim.Adapter.
func (a *Adapter) RecordHost(m *infrav1.YonderSSHMachine, h *infrav1.YonderSSHHost) {
	m.Status.HostRef = h.Name
	m.Status.Addresses = addresses(h)
}

// runID is the name of m's bootstrap run on its host: its claim identity, so a moved machine finds it.
func runID(m *infrav1.YonderSSHMachine) string { return string(claim.ID(m, infrav1.ClaimIDAnnotation)) }
