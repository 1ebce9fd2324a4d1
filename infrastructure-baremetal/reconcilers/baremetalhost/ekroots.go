package baremetalhost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
)

// The manager reads the EK roots ConfigMap through a cache of its own, limited to that one object, so a
// namespaced Role (config/rbac) is all it needs: no cluster-wide read of ConfigMaps.
// +kubebuilder:rbac:groups="",namespace=system,resources=configmaps,verbs=get;list;watch

// Keys of the EK roots ConfigMap (--ek-roots-configmap). Keys ending in .pem or .crt hold one or more PEM
// certificates; those whose name starts with EKIntermediateKeyPrefix are intermediate CAs (offered when
// building chains, never trusted alone), every other one holds vendor root CAs. Other keys (a README)
// are ignored.
const (
	EKIntermediateKeyPrefix = "intermediate"
)

// Events on the EK roots ConfigMap.
const (
	// EKRootsLoadedReason: the ConfigMap's certificates are in use.
	EKRootsLoadedReason = "EKRootsLoaded"
	// EKRootsInvalidReason: a key does not hold valid PEM certificates; the last good set stays in use.
	EKRootsInvalidReason = "EKRootsInvalid"
)

// BareMetalHostEKRootsNotLoadedReason (condition EKCertificatesVerified=False): the manager verifies EK
// certificates but holds no vendor root yet (its ConfigMap is missing, empty or never valid), so hosts
// cannot attest until one is added.
const BareMetalHostEKRootsNotLoadedReason = "VendorRootsNotLoaded"

// ParseConfigMapRef parses --ek-roots-configmap's <namespace>/<name>.
func ParseConfigMapRef(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%q is not <namespace>/<name>", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// EKRootsFromConfigMap reads a ConfigMap's certificate keys (data and binaryData). An error names the
// first bad key: the caller keeps its last good set rather than trusting part of a broken edit.
func EKRootsFromConfigMap(cm *corev1.ConfigMap) (attest.EKCerts, error) {
	keys := map[string][]byte{}
	for k, v := range cm.Data {
		keys[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		keys[k] = v
	}
	var out attest.EKCerts
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !strings.HasSuffix(k, ".pem") && !strings.HasSuffix(k, ".crt") {
			continue
		}
		certs, err := attest.ParseCertificates(keys[k])
		if err != nil {
			return attest.EKCerts{}, fmt.Errorf("key %q of ConfigMap %s/%s: %w", k, cm.Namespace, cm.Name, err)
		}
		if strings.HasPrefix(k, EKIntermediateKeyPrefix) {
			out.Intermediates = append(out.Intermediates, certs...)
		} else {
			out.Roots = append(out.Roots, certs...)
		}
	}
	return out, nil
}

// EKRootsWatch keeps an EKTrust's ConfigMap source equal to the ConfigMap's certificates: every change
// applies to the next attestation. A change that does not parse leaves the last good certificates in
// place, logs the error and records it as a Warning Event on the ConfigMap; a deleted ConfigMap removes
// its roots. Hosts are told through Changes (their EKCertificatesVerified condition).
type EKRootsWatch struct {
	// ConfigMap is the watched ConfigMap.
	ConfigMap types.NamespacedName
	// Trust receives the certificates as source "configmap <namespace>/<name>".
	Trust *attest.EKTrust
	// Reader reads the ConfigMap (the watch's own cache).
	Reader client.Reader
	// Recorder records Events on the ConfigMap.
	Recorder record.EventRecorder

	changes chan event.GenericEvent

	mu      sync.Mutex
	loaded  bool   // a valid version was applied
	problem string // why the ConfigMap's current version is not (entirely) in use; "" when it is
}

// source is the name of the ConfigMap's certificates in Trust.
func (w *EKRootsWatch) source() string { return "configmap " + w.ConfigMap.String() }

// Changes delivers an event whenever what hosts should say about EK trust changed (buffered: a pending
// event stands for any number of changes).
func (w *EKRootsWatch) Changes() <-chan event.GenericEvent { return w.changes }

// State is what the manager's EK trust looks like now: how many roots it holds from every source, and
// the problem with the ConfigMap ("" when none).
func (w *EKRootsWatch) State() (roots int, problem string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	problem = w.problem
	if !w.loaded && problem == "" {
		problem = fmt.Sprintf("ConfigMap %s was not read yet", w.ConfigMap)
	}
	return w.Trust.RootCount(), problem
}

func (w *EKRootsWatch) setState(loaded bool, problem string) {
	w.mu.Lock()
	w.loaded, w.problem = loaded, problem
	w.mu.Unlock()
	select {
	case w.changes <- event.GenericEvent{Object: &corev1.ConfigMap{}}:
	default: // one is pending: the hosts will read the newest state
	}
}

// WatchEKRoots starts an EKRootsWatch of key in mgr, with a cache limited to that ConfigMap.
func WatchEKRoots(mgr ctrl.Manager, key types.NamespacedName, trust *attest.EKTrust, opts controller.Options) (*EKRootsWatch, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{key.Namespace: {FieldSelector: fields.OneTermEqualSelector("metadata.name", key.Name)}}})
	if err != nil {
		return nil, fmt.Errorf("failed to create the cache of ConfigMap %s: %w", key, err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("failed to add the cache of ConfigMap %s: %w", key, err)
	}
	w := &EKRootsWatch{ConfigMap: key, Trust: trust, Reader: c, changes: make(chan event.GenericEvent, 1),
		Recorder: mgr.GetEventRecorderFor("yonder-metal-manager")} //nolint:staticcheck // core/v1 Events, as the host controller records them.
	opts.MaxConcurrentReconciles = 1
	err = ctrl.NewControllerManagedBy(mgr).
		Named("ekroots").
		WithOptions(opts).
		WatchesRawSource(source.Kind(c, &corev1.ConfigMap{}, &handler.TypedEnqueueRequestForObject[*corev1.ConfigMap]{})).
		// Once at start (after the cache synced), so a ConfigMap that does not exist is reported as such.
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			q.Add(reconcile.Request{NamespacedName: key})
			return nil
		})).
		Complete(w)
	if err != nil {
		return nil, fmt.Errorf("failed to watch ConfigMap %s: %w", key, err)
	}
	return w, nil
}

// Reconcile implements reconcile.Reconciler for the watched ConfigMap.
func (w *EKRootsWatch) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.NamespacedName != w.ConfigMap {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("ConfigMap", req.NamespacedName.String())
	cm := &corev1.ConfigMap{}
	if err := w.Reader.Get(ctx, req.NamespacedName, cm); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("failed to get ConfigMap %s: %w", req.NamespacedName, err)
		}
		// Missing at start, or deleted: the operator withdrew these roots.
		w.Trust.Set(w.source(), attest.EKCerts{})
		log.Info("Waiting for the EK roots ConfigMap: it does not exist, so EKs that need a vendor root are refused until it holds one",
			"rootsFromOtherSources", w.Trust.RootCount())
		w.setState(false, fmt.Sprintf("ConfigMap %s does not exist", w.ConfigMap))
		return ctrl.Result{}, nil
	}
	certs, err := EKRootsFromConfigMap(cm)
	if err != nil {
		// Keep the last good set: a typo in one key must not stop every host's attestation.
		log.Error(err, "Refusing EK roots ConfigMap change, keeping the previous certificates")
		w.Recorder.Eventf(cm, corev1.EventTypeWarning, EKRootsInvalidReason,
			"Not applied, the previous EK certificates stay in use: %v", err)
		w.mu.Lock()
		loaded := w.loaded
		w.mu.Unlock()
		w.setState(loaded, fmt.Sprintf("the latest version of ConfigMap %s was not applied: %v", w.ConfigMap, err))
		return ctrl.Result{}, nil
	}
	w.Trust.Set(w.source(), certs)
	log.Info("Loading EK roots", "roots", len(certs.Roots), "intermediates", len(certs.Intermediates))
	w.Recorder.Eventf(cm, corev1.EventTypeNormal, EKRootsLoadedReason, "Loaded %d root and %d intermediate EK certificates",
		len(certs.Roots), len(certs.Intermediates))
	problem := ""
	if len(certs.Roots) == 0 {
		problem = fmt.Sprintf("ConfigMap %s holds no root certificate (keys *.pem or *.crt not starting with %q)", w.ConfigMap, EKIntermediateKeyPrefix)
	}
	w.setState(true, problem)
	return ctrl.Result{}, nil
}

// errNoEKRoots is what Options.attestation refuses: boot services that could never verify an EK.
var errNoEKRoots = errors.New("--boot-interface needs --ek-roots or --ek-roots-configmap (the TPM vendors' EK root CAs) or, knowingly, --insecure-accept-any-ek")
