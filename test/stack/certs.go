package stack

import (
	"context"
	"fmt"
	"time"

	"github.com/yonder-dev/yonder/test/certmanager"
)

// certificatesTimeout bounds the wait for cert-manager to issue every Certificate and inject every caBundle
// (test/certmanager's test measured 3-7 s for all four providers' components on a busy 2-core machine).
const certificatesTimeout = 3 * time.Minute

// startCertManager starts the real cert-manager controller and cainjector (test/certmanager) against the
// management cluster, after clusterctl init has installed cert-manager's CRDs and the providers' Issuers,
// Certificates and annotated webhook configurations, and waits until cert-manager has issued them.
func (s *Stack) startCertManager(ctx context.Context) error {
	t0 := time.Now()
	cm, err := certmanager.Start(ctx, s.Management.AdminKubeconfigPath, s.logDir)
	if err != nil {
		return fmt.Errorf("failed to start cert-manager: %w", err)
	}
	s.certManager = cm
	if err := s.waitForCertificates(ctx); err != nil {
		return err
	}
	s.opts.Log("cert-manager issued the providers' certificates and injected their CAs in %s", time.Since(t0).Round(time.Millisecond))
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
