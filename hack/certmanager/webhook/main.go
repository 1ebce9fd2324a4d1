// Command cert-manager-webhook is cert-manager's admission webhook (validation and defaulting of
// cert-manager's own resources, and the CertificateRequest identity and approval checks), built for
// Yonder's tests and lab: upstream's cmd/webhook is a module of its own that the Go module proxy does not
// serve. The server, its admission chain and its certificate handling are cert-manager's
// (internal/webhook.NewCertManagerWebhookServer, which this module may import because its path lies under
// github.com/cert-manager/cert-manager, see go.mod); this file only reads flags into cert-manager's
// WebhookConfiguration, defaulted and validated by cert-manager's own config API.
//
// The flags keep upstream's names. As upstream's chart runs it, the serving certificate is dynamic: the
// webhook keeps a CA in the Secret --dynamic-serving-ca-secret-name (creating it when absent) and signs
// its own leaf for --dynamic-serving-dns-names; cert-manager's cainjector copies that CA into the
// webhook configurations annotated with cert-manager.io/inject-ca-from-secret.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	sharedext "github.com/cert-manager/cert-manager/pkg/apis/config/shared/v1alpha1"
	configext "github.com/cert-manager/cert-manager/pkg/apis/config/webhook/v1alpha1"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	config "github.com/cert-manager/cert-manager/internal/apis/config/webhook"
	configscheme "github.com/cert-manager/cert-manager/internal/apis/config/webhook/scheme"
	configvalidation "github.com/cert-manager/cert-manager/internal/apis/config/webhook/validation"
	"github.com/cert-manager/cert-manager/internal/webhook"
)

func main() {
	fs := flag.NewFlagSet("cert-manager-webhook", flag.ExitOnError)
	var (
		kubeconfig      = fs.String("kubeconfig", "", "kubeconfig of the apiserver to serve (empty: the Pod's in-cluster credentials)")
		securePort      = fs.Int("secure-port", 6443, "port of the HTTPS admission endpoint (all addresses)")
		healthzPort     = fs.Int("healthz-port", 6080, "port of the plain-HTTP /healthz and /livez endpoints (all addresses)")
		metricsAddress  = fs.String("metrics-listen-address", "0", "address of the Prometheus metrics endpoint (0: off)")
		caNamespace     = fs.String("dynamic-serving-ca-secret-namespace", "cert-manager", "namespace of the Secret that holds the serving CA")
		caSecret        = fs.String("dynamic-serving-ca-secret-name", "cert-manager-webhook-ca", "Secret that holds the serving CA (created when absent)")
		dnsNames        dnsNameList
		minTLSVersion   = fs.String("tls-min-version", "", "minimum TLS version (empty: cert-manager's default)")
		enableProfiling = fs.Bool("enable-profiling", false, "serve pprof on localhost:6060")
	)
	// Repeated (the chart's Deployment names each DNS name in a flag of its own) or comma-separated.
	fs.Var(&dnsNames, "dynamic-serving-dns-names", "DNS names (and IP addresses) of the serving certificate, comma-separated or repeated (required)")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag exits with the usage
	if len(dnsNames) == 0 {
		fmt.Fprintln(os.Stderr, "cert-manager-webhook: --dynamic-serving-dns-names is required")
		os.Exit(2)
	}

	cfg, err := configuration(func(c *configext.WebhookConfiguration) {
		c.KubeConfig = *kubeconfig
		c.SecurePort = new(int32(*securePort))   //nolint:gosec // validated below: ports fit in int32
		c.HealthzPort = new(int32(*healthzPort)) //nolint:gosec // as above
		c.MetricsListenAddress = *metricsAddress
		c.EnablePprof = *enableProfiling
		c.TLSConfig.MinTLSVersion = *minTLSVersion
		c.TLSConfig.Dynamic = sharedext.DynamicServingConfig{
			SecretNamespace: *caNamespace,
			SecretName:      *caSecret,
			DNSNames:        dnsNames,
		}
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager-webhook: %v\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := logf.Log.WithName("webhook")
	ctx = logf.NewContext(ctx, log)
	srv, err := webhook.NewCertManagerWebhookServer(log, *cfg)
	if err == nil {
		err = srv.Run(ctx)
	}
	logf.FlushLogs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager-webhook: %v\n", err)
		os.Exit(1)
	}
}

// configuration builds the webhook's configuration the way upstream's command does from its config file:
// the external version with cert-manager's defaults, the flags applied, converted to the internal type and
// checked by cert-manager's validation.
func configuration(set func(*configext.WebhookConfiguration)) (*config.WebhookConfiguration, error) {
	scheme, _, err := configscheme.NewSchemeAndCodecs()
	if err != nil {
		return nil, err
	}
	ext := &configext.WebhookConfiguration{}
	scheme.Default(ext)
	set(ext)
	cfg := &config.WebhookConfiguration{}
	if err := scheme.Convert(ext, cfg, nil); err != nil {
		return nil, fmt.Errorf("failed to convert the configuration: %w", err)
	}
	if errs := configvalidation.ValidateWebhookConfiguration(cfg, nil); len(errs) > 0 {
		return nil, fmt.Errorf("invalid configuration: %w", errs.ToAggregate())
	}
	return cfg, nil
}

// dnsNameList is a flag of names that may be repeated and comma-separated, as upstream's string slice flags.
type dnsNameList []string

func (l *dnsNameList) String() string { return strings.Join(*l, ",") }

func (l *dnsNameList) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			*l = append(*l, n)
		}
	}
	return nil
}
