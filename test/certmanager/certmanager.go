// Package certmanager runs the real cert-manager against a test apiserver: its controller (Issuers,
// ClusterIssuers, the Certificate lifecycle, the CertificateRequest approver and the SelfSigned and CA
// signers) and its cainjector (caBundle of webhook configurations, APIServices and CRD conversion
// webhooks), as processes built by hack/test-bins.sh from cert-manager's packages (hack/certmanager). A
// provider's components then get their serving certificates exactly as on a user's management cluster, so
// wrong cert-manager wiring in our manifests (an issuerRef, an inject-ca-from annotation, a Service name)
// fails the tests instead of being papered over by a harness that signs whatever it finds.
//
// cert-manager's webhook (validation of cert-manager's own resources, and the identity and approval checks
// of CertificateRequests) runs as a third process when asked (StartWebhook), serving the configurations
// WebhookConfigurations returns with a CA it keeps in a Secret, as upstream's chart deploys it.
//
// The processes do no leader election: each apiserver gets exactly one controller, one injector and at most
// one webhook, whose lifetime the harness owns (Stop).
package certmanager

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/testbins"
)

// InjectCAAnnotation is the cainjector's annotation: <namespace>/<Certificate name>.
const InjectCAAnnotation = "cert-manager.io/inject-ca-from"

// InjectCAFromSecretAnnotation is the cainjector's annotation that names the Secret itself:
// <namespace>/<Secret name> (the Secret must carry cert-manager.io/allow-direct-injection: "true").
const InjectCAFromSecretAnnotation = "cert-manager.io/inject-ca-from-secret" //nolint:gosec // an annotation key, not a credential

// Binary names in the test-bins directory (hack/test-bins.sh's BUILT_BINARIES).
const (
	ControllerBinary = "cert-manager-controller"
	CAInjectorBinary = "cert-manager-cainjector"
	WebhookBinary    = "cert-manager-webhook"
)

// CertificateGVK is cert-manager's Certificate; the harness reads it unstructured so that the root module does
// not take cert-manager's dependencies.
var CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// IssuerGVK is cert-manager's Issuer.
var IssuerGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}

// CertificateRequestGVK is cert-manager's CertificateRequest.
var CertificateRequestGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "CertificateRequest"}

// stopGrace is how long each process gets to end after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// CertManager is a running controller and cainjector, and the webhook once StartWebhook started it.
type CertManager struct {
	controller *proc.Process
	cainjector *proc.Process
	webhook    *proc.Process
}

// processes are the running processes, in the order they started.
func (cm *CertManager) processes() []*proc.Process {
	var ps []*proc.Process
	for _, p := range []*proc.Process{cm.controller, cm.cainjector, cm.webhook} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// Start starts cert-manager's controller and cainjector against the apiserver of kubeconfig (a file with
// credentials that may do what cert-manager's ClusterRoles allow; the harness passes an admin), logging to
// <logDir>/cert-manager-controller.log and cert-manager-cainjector.log. cert-manager's CRDs must be
// installed already: the controller's informers wait for them. Start returns once both processes run; use
// WaitForCertificates to wait for what they issue.
func Start(ctx context.Context, kubeconfig, logDir string) (_ *CertManager, rerr error) {
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil, fmt.Errorf("cert-manager needs a kubeconfig file: %w", err)
	}
	ctlBin, err := testbins.Path(ControllerBinary)
	if err != nil {
		return nil, err
	}
	injBin, err := testbins.Path(CAInjectorBinary)
	if err != nil {
		return nil, err
	}
	cm := &CertManager{}
	defer func() {
		if rerr != nil {
			_ = cm.Stop()
		}
	}()
	// The apiserver's serving CA goes to the cainjector's inject-apiserver-ca sources through the kubeconfig.
	// One controller and one injector per apiserver, many on this machine: no leader election, no listeners
	// (the chart's Deployments run with upstream's defaults instead: in-cluster, elected, on their ports).
	if cm.controller, err = proc.Start(ControllerBinary, logDir, nil, ctlBin, "--kubeconfig", kubeconfig,
		"--leader-elect=false", "--healthz-listen-address=0", "--metrics-listen-address=0"); err != nil {
		return nil, err
	}
	if cm.cainjector, err = proc.Start(CAInjectorBinary, logDir, nil, injBin, "--kubeconfig", kubeconfig,
		"--leader-elect=false", "--metrics-listen-address=0"); err != nil {
		return nil, err
	}
	// A broken kubeconfig or a missing CRD makes a process exit within its first second; say so here rather
	// than as a Certificate that never becomes Ready.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Second):
	}
	if err := cm.exited(); err != nil {
		return nil, err
	}
	return cm, nil
}

// exited returns an error with the log tail of a process that has ended.
func (cm *CertManager) exited() error {
	for _, p := range cm.processes() {
		if p.Exited() {
			return fmt.Errorf("%s exited; last log lines from %s:\n%s", p.Name, p.LogPath, p.Tail(20))
		}
	}
	return nil
}

// Stop ends every process (SIGTERM, then SIGKILL after a grace period), the last started first. Safe to
// call more than once.
func (cm *CertManager) Stop() error {
	ps := cm.processes()
	for i := len(ps) - 1; i >= 0; i-- {
		if err := ps[i].Stop(stopGrace); err != nil {
			return fmt.Errorf("failed to stop %s: %w", ps[i].Name, err)
		}
	}
	return nil
}

// Logs returns the last n lines of each process's log, for a failure message.
func (cm *CertManager) Logs(n int) string {
	var b strings.Builder
	for _, p := range cm.processes() {
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", p.Name, p.LogPath, p.Tail(n))
	}
	return b.String()
}

// WaitForCertificates waits until every cert-manager Certificate in the cluster is Ready and every webhook
// configuration and CRD annotated with cert-manager.io/inject-ca-from carries the CA of the Certificate it
// names (the ca.crt of that Certificate's Secret). It fails early, with the log tails, when a cert-manager
// process exits, and at the timeout names what is still missing.
func (cm *CertManager) WaitForCertificates(ctx context.Context, c client.Client, timeout time.Duration) error {
	return waitIssued(ctx, c, timeout, cm.exited, func() string { return cm.Logs(10) })
}

// WaitForCertificates is CertManager.WaitForCertificates for a cert-manager that is not the harness's
// processes (its chart's Deployments, run by kubelets): at the timeout it names what is still missing.
func WaitForCertificates(ctx context.Context, c client.Client, timeout time.Duration) error {
	return waitIssued(ctx, c, timeout, func() error { return nil }, func() string { return "" })
}

// waitIssued polls Pending until nothing is, failing early when exited reports a dead cert-manager, and
// adds logs to the error at the timeout.
func waitIssued(ctx context.Context, c client.Client, timeout time.Duration, exited func() error, logs func() string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		pending, err := Pending(ctx, c)
		if err == nil && len(pending) == 0 {
			return nil
		}
		if perr := exited(); perr != nil {
			return perr
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("cert-manager did not issue the Certificates within %s: %w\n%s", timeout, err, logs())
			}
			return fmt.Errorf("cert-manager did not issue the Certificates within %s; still waiting for: %s\n%s", timeout, strings.Join(pending, "; "), logs())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Pending lists what cert-manager has not done yet: Certificates not Ready, and annotated webhook
// configurations and CRDs whose caBundles are not the CA of the Certificate they name.
func Pending(ctx context.Context, c client.Client) ([]string, error) {
	certs := &unstructured.UnstructuredList{}
	certs.SetGroupVersionKind(CertificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := c.List(ctx, certs); err != nil {
		return nil, fmt.Errorf("failed to list Certificates: %w", err)
	}
	var pending []string
	for i := range certs.Items {
		if !IsReady(&certs.Items[i]) {
			pending = append(pending, fmt.Sprintf("Certificate %s/%s not Ready (%s)", certs.Items[i].GetNamespace(), certs.Items[i].GetName(), ConditionMessage(&certs.Items[i], "Ready")))
		}
	}
	targets, err := InjectionTargets(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, t := range targets {
		source, caOf := "Certificate", CertificateCA
		if t.FromSecret {
			source, caOf = "Secret", SecretCA
		}
		ca, err := caOf(ctx, c, t.From)
		if err != nil {
			return nil, err
		}
		if ca == nil {
			pending = append(pending, fmt.Sprintf("%s: %s %s has no ca.crt yet", t.Name, source, t.From))
			continue
		}
		for i, b := range t.CABundles {
			if !bytes.Equal(b, ca) {
				pending = append(pending, fmt.Sprintf("%s: caBundle %d is not the CA of %s %s", t.Name, i, source, t.From))
			}
		}
	}
	return pending, nil
}

// IsReady reports whether a Certificate (or CertificateRequest) has the condition Ready=True.
func IsReady(obj *unstructured.Unstructured) bool {
	return ConditionStatus(obj, "Ready") == "True"
}

// ConditionStatus returns the status of condition typ of a cert-manager object, "" when it has none.
func ConditionStatus(obj *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// ConditionMessage returns "<reason>: <message>" of condition typ of a cert-manager object, "no <typ>
// condition" when it has none.
func ConditionMessage(obj *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == typ {
			return fmt.Sprintf("%v: %v", m["reason"], m["message"])
		}
	}
	return "no " + typ + " condition"
}

// InjectionTarget is one object that the cainjector must give a caBundle.
type InjectionTarget struct {
	// Name says which object, e.g. "ValidatingWebhookConfiguration bootstrap-yonder-validating-webhook-configuration".
	Name string
	// From is the annotation's <namespace>/<Certificate name>, or <namespace>/<Secret name> when FromSecret.
	From types.NamespacedName
	// FromSecret says that the annotation is inject-ca-from-secret: the CA is the Secret's own ca.crt.
	FromSecret bool
	// CABundles are the object's current caBundles: one per webhook, or the CRD's conversion webhook's.
	CABundles [][]byte
}

// InjectionTargets lists every webhook configuration and CRD annotated with cert-manager.io/inject-ca-from
// or cert-manager.io/inject-ca-from-secret.
func InjectionTargets(ctx context.Context, c client.Client) ([]InjectionTarget, error) {
	var out []InjectionTarget
	add := func(kind, name string, ann map[string]string, bundles [][]byte) error {
		annotation, fromSecret := InjectCAAnnotation, false
		from, ok := ann[annotation]
		if !ok {
			annotation, fromSecret = InjectCAFromSecretAnnotation, true
			if from, ok = ann[annotation]; !ok {
				return nil
			}
		}
		ns, n, found := strings.Cut(from, "/")
		if !found || ns == "" || n == "" {
			return fmt.Errorf("%s %s: annotation %s=%q is not <namespace>/<name>", kind, name, annotation, from)
		}
		out = append(out, InjectionTarget{Name: kind + " " + name, From: types.NamespacedName{Namespace: ns, Name: n}, FromSecret: fromSecret, CABundles: bundles})
		return nil
	}
	vwcs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := c.List(ctx, vwcs); err != nil {
		return nil, fmt.Errorf("failed to list ValidatingWebhookConfigurations: %w", err)
	}
	for _, w := range vwcs.Items {
		var b [][]byte
		for _, h := range w.Webhooks {
			b = append(b, h.ClientConfig.CABundle)
		}
		if err := add("ValidatingWebhookConfiguration", w.Name, w.Annotations, b); err != nil {
			return nil, err
		}
	}
	mwcs := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := c.List(ctx, mwcs); err != nil {
		return nil, fmt.Errorf("failed to list MutatingWebhookConfigurations: %w", err)
	}
	for _, w := range mwcs.Items {
		var b [][]byte
		for _, h := range w.Webhooks {
			b = append(b, h.ClientConfig.CABundle)
		}
		if err := add("MutatingWebhookConfiguration", w.Name, w.Annotations, b); err != nil {
			return nil, err
		}
	}
	// CRDs are read unstructured so that a caller's scheme need not know apiextensions (the stack's does not).
	crds := &unstructured.UnstructuredList{}
	crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinitionList"))
	if err := c.List(ctx, crds); err != nil {
		return nil, fmt.Errorf("failed to list CustomResourceDefinitions: %w", err)
	}
	for _, crd := range crds.Items {
		var b [][]byte
		if _, ok, _ := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig"); ok {
			// JSON carries a []byte as base64 text.
			enc, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
			dec, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				return nil, fmt.Errorf("CustomResourceDefinition %s: caBundle is not base64: %w", crd.GetName(), err)
			}
			b = append(b, dec)
		}
		if err := add("CustomResourceDefinition", crd.GetName(), crd.GetAnnotations(), b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CertificateCA returns the ca.crt of the Secret that Certificate key writes, nil while there is none.
func CertificateCA(ctx context.Context, c client.Client, key types.NamespacedName) ([]byte, error) {
	cert := &unstructured.Unstructured{}
	cert.SetGroupVersionKind(CertificateGVK)
	if err := c.Get(ctx, key, cert); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to read Certificate %s: %w", key, err)
	}
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	sec := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: secretName}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to read Secret %s/%s of Certificate %s: %w", key.Namespace, secretName, key, err)
	}
	return sec.Data["ca.crt"], nil
}

// SecretCA returns the ca.crt of Secret key, nil while the Secret or its ca.crt is missing.
func SecretCA(ctx context.Context, c client.Client, key types.NamespacedName) ([]byte, error) {
	sec := &corev1.Secret{}
	if err := c.Get(ctx, key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to read Secret %s: %w", key, err)
	}
	return sec.Data["ca.crt"], nil
}

// CRDDir returns deploy/crds of the cert-manager version hack/certmanager/go.mod requires (the CRDs that
// the built controller serves), downloading the module into Go's module cache when it is not there.
func CRDDir(ctx context.Context) (string, error) {
	mod := filepath.Join(testbins.RepoRoot(), "hack", "certmanager")
	// go mod download resolves the version from hack/certmanager/go.mod and prints the module's directory,
	// fetching it first only when the cache lacks it.
	out, err := proc.Run(ctx, "go", "-C", mod, "mod", "download", "-json", "github.com/cert-manager/cert-manager")
	if err != nil {
		return "", fmt.Errorf("failed to locate cert-manager's module (hack/certmanager): %w", err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download gave no directory for cert-manager (%v): %s", err, out)
	}
	dir := filepath.Join(m.Dir, "deploy", "crds")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("cert-manager's module has no deploy/crds: %w", err)
	}
	return dir, nil
}
