package certmanager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/testbins"
)

// Names of what upstream's chart deploys for the webhook (release name cert-manager, v1.21's templates and
// default values; WebhookManifest).
const (
	// Namespace is where cert-manager's chart installs it.
	Namespace = "cert-manager"
	// WebhookName names the webhook's Service and both webhook configurations.
	WebhookName = "cert-manager-webhook"
	// WebhookCASecret is the Secret in which the webhook keeps the CA of its serving certificate.
	WebhookCASecret = "cert-manager-webhook-ca" //nolint:gosec // a Secret name, not a credential
)

// WebhookDNSNames are the names the apiserver asks for when it calls the webhook through its Service.
func WebhookDNSNames() []string {
	return []string{WebhookName, WebhookName + "." + Namespace, WebhookName + "." + Namespace + ".svc"}
}

// Webhook is how StartWebhook runs cert-manager's webhook.
type Webhook struct {
	// Port is the HTTPS admission port and HealthzPort the plain-HTTP health port; both are bound on every
	// address of the host, as upstream's webhook does.
	Port, HealthzPort int
	// DNSNames are the names the serving certificate carries (WebhookDNSNames for calls through the Service).
	DNSNames []string
}

// webhookReadyTimeout bounds the wait for the webhook's first serving certificate (it creates its CA Secret
// first); measured well under a second on an idle apiserver.
const webhookReadyTimeout = time.Minute

// StartWebhook starts cert-manager's webhook against the apiserver of kubeconfig and waits until it serves:
// its /healthz answers once it holds a serving certificate signed by the CA in Secret
// Namespace/WebhookCASecret, which it creates when absent (the namespace must exist). The apiserver calls it
// once the webhook configurations (WebhookManifest) exist and the cainjector has copied that CA into them.
func (cm *CertManager) StartWebhook(ctx context.Context, kubeconfig, logDir string, w Webhook) error {
	if cm.webhook != nil {
		return fmt.Errorf("cert-manager's webhook is already running (%s)", cm.webhook.LogPath)
	}
	if w.Port <= 0 || w.HealthzPort <= 0 || len(w.DNSNames) == 0 {
		return fmt.Errorf("cert-manager's webhook needs its ports and DNS names, got %+v", w)
	}
	bin, err := testbins.Path(WebhookBinary)
	if err != nil {
		return err
	}
	p, err := proc.Start(WebhookBinary, logDir, nil, bin, "--kubeconfig", kubeconfig,
		"--secure-port", strconv.Itoa(w.Port), "--healthz-port", strconv.Itoa(w.HealthzPort),
		"--dynamic-serving-ca-secret-namespace", Namespace, "--dynamic-serving-ca-secret-name", WebhookCASecret,
		"--dynamic-serving-dns-names", strings.Join(w.DNSNames, ","))
	if err != nil {
		return err
	}
	cm.webhook = p
	healthz := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(w.HealthzPort)) + "/healthz"
	hc := &http.Client{Timeout: 2 * time.Second}
	return p.WaitFor(ctx, webhookReadyTimeout, func(ctx context.Context) error { return proc.HTTPOK(ctx, hc, healthz) })
}

// WebhookManifest returns the objects of upstream's chart that route the apiserver to cert-manager's webhook
// (hack/certmanager/webhook.yaml): the webhook's Service, and the validating (every cert-manager.io and
// acme.cert-manager.io object on create and update, except in namespaces labelled
// cert-manager.io/disable-validation=true) and mutating (CertificateRequests on create) webhook
// configurations, failurePolicy Fail, whose caBundles the cainjector fills from WebhookCASecret.
func WebhookManifest() (*corev1.Service, *admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration, error) {
	path := filepath.Join(testbins.RepoRoot(), "hack", "certmanager", "webhook.yaml")
	f, err := os.Open(path) //nolint:gosec // a file of the repository
	if err != nil {
		return nil, nil, nil, err
	}
	defer func() { _ = f.Close() }()
	svc := &corev1.Service{}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	byKind := map[string]any{"Service": svc, "ValidatingWebhookConfiguration": vwc, "MutatingWebhookConfiguration": mwc}
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		kind, _ := raw["kind"].(string)
		into, ok := byKind[kind]
		if !ok {
			return nil, nil, nil, fmt.Errorf("%s: unexpected object of kind %q", path, kind)
		}
		delete(byKind, kind)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, into); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %s: %w", path, kind, err)
		}
	}
	if len(byKind) > 0 {
		return nil, nil, nil, fmt.Errorf("%s: missing %v", path, slices.Sorted(maps.Keys(byKind)))
	}
	return svc, vwc, mwc, nil
}

// WaitForWebhook waits until the apiserver admits a cert-manager object through the webhook: a dry-run
// create of a SelfSigned Issuer in Namespace, which calls the validating webhook once its configuration
// exists (with dry run nothing is stored). It returns early with the log tails when a cert-manager process
// exits, and at the timeout with the apiserver's last answer.
func (cm *CertManager) WaitForWebhook(ctx context.Context, c client.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		issuer := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"selfSigned": map[string]any{}}}}
		issuer.SetGroupVersionKind(IssuerGVK)
		issuer.SetNamespace(Namespace)
		issuer.SetName("yonder-webhook-probe")
		err := c.Create(ctx, issuer, client.DryRunAll)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if perr := cm.exited(); perr != nil {
			return perr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the apiserver did not admit a cert-manager Issuer through the webhook within %s: %w\n%s", timeout, err, cm.Logs(10))
		case <-time.After(250 * time.Millisecond):
		}
	}
}
