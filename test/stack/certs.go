package stack

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/certmanager"
)

// certificatesTimeout bounds the wait for cert-manager to issue every Certificate and inject every caBundle
// (test/certmanager's test measured 3-7 s for all four providers' components on a busy 2-core machine).
const certificatesTimeout = 3 * time.Minute

// certManagerManifestTimeout bounds the wait for cert-manager's manifest to be applied (clusterctl init
// applies it first, within seconds of its start).
const certManagerManifestTimeout = 3 * time.Minute

// initProviders runs `clusterctl init` and, while it runs, cert-manager: as on a user's cluster, where
// cert-manager's pods start once init has applied its manifest, and init then waits until cert-manager's
// API admits its test objects — through cert-manager's webhook, whose configurations fail closed. Once
// init is done it waits until cert-manager has issued the providers' certificates and injected their CAs.
// A failure of either side ends the other.
func (s *Stack) initProviders(ctx context.Context) error {
	t0 := time.Now()
	initCtx, cancelInit := context.WithCancel(ctx)
	defer cancelInit()
	certCtx, cancelCert := context.WithCancel(ctx)
	defer cancelCert()
	initDone := make(chan error, 1)
	go func() {
		err := s.clusterctlInit(initCtx)
		if err != nil {
			cancelCert()
		}
		initDone <- err
	}()
	certErr := s.runCertManager(certCtx)
	if certErr != nil {
		cancelInit()
	}
	initErr := <-initDone
	switch {
	case initErr != nil && (certErr == nil || errors.Is(certErr, context.Canceled)):
		return initErr
	case certErr != nil:
		return certErr
	}
	s.opts.Log("clusterctl init done, cert-manager serving, in %s", time.Since(t0).Round(time.Millisecond))
	t1 := time.Now()
	if err := s.waitForCertificates(ctx); err != nil {
		return err
	}
	s.opts.Log("cert-manager issued the providers' certificates and injected their CAs in %s", time.Since(t1).Round(time.Millisecond))
	return nil
}

// runCertManager starts the real cert-manager (test/certmanager: controller, cainjector and webhook)
// against the management cluster once its manifest is applied (the webhook's Service exists), routes the
// webhook's Service to the webhook process (an EndpointSlice on the bridge address, as for the managers),
// and waits until the apiserver admits cert-manager objects through it.
func (s *Stack) runCertManager(ctx context.Context) error {
	svc := client.ObjectKey{Namespace: certmanager.Namespace, Name: certmanager.WebhookName}
	if err := WaitFor(ctx, certManagerManifestTimeout, func(ctx context.Context) (bool, error) {
		err := s.Client.Get(ctx, svc, &corev1.Service{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return fmt.Errorf("management cluster %s: cert-manager's manifest was not applied (no Service %s): %w", s.Management.Name, svc, err)
	}
	cm, err := certmanager.Start(ctx, s.Management.AdminKubeconfigPath, s.logDir)
	if err != nil {
		return fmt.Errorf("failed to start cert-manager: %w", err)
	}
	s.certManager = cm
	_, port, err := s.freeAddr()
	if err != nil {
		return err
	}
	_, healthz, err := s.freeAddr()
	if err != nil {
		return err
	}
	if err := cm.StartWebhook(ctx, s.Management.AdminKubeconfigPath, s.logDir, certmanager.Webhook{
		Port: port, HealthzPort: healthz, DNSNames: certmanager.WebhookDNSNames()}); err != nil {
		return fmt.Errorf("failed to start cert-manager's webhook: %w", err)
	}
	if err := s.routeWebhookService(ctx, certmanager.Namespace, port); err != nil {
		return err
	}
	if err := cm.WaitForWebhook(ctx, s.Client, certificatesTimeout); err != nil {
		return fmt.Errorf("management cluster %s: %w (logs in %s)", s.Management.Name, err, s.logDir)
	}
	return nil
}

// waitForCertificates waits until cert-manager has issued every Certificate in the management cluster and
// injected each webhook configuration's and CRD's caBundle: what the managers' webhooks, and the apiserver
// calling them, need.
func (s *Stack) waitForCertificates(ctx context.Context) error {
	if err := s.certManager.WaitForCertificates(ctx, s.Client, certificatesTimeout); err != nil {
		return fmt.Errorf("management cluster %s: %w (logs in %s)", s.Management.Name, err, s.logDir)
	}
	return nil
}

// stopCertManager stops cert-manager's processes, if they run.
func (s *Stack) stopCertManager() error {
	if s.certManager == nil {
		return nil
	}
	return s.certManager.Stop()
}
