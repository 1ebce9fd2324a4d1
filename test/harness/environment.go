package harness

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/onsi/gomega"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/cluster-api/feature"

	"github.com/yonder-dev/yonder/test/envtest"
)

// providerEnvironment is what a provider adds to a management environment.
type providerEnvironment struct {
	crds            []string
	webhookManifest string
	scheme          []func(*runtime.Scheme) error
	webhooks        func(ctrl.Manager) error
}

// providerEnvironments are the providers Providers knows, by name.
var providerEnvironments = map[string]providerEnvironment{
	"ssh": {crds: []string{"infrastructure-ssh/config/crd/bases"}, webhookManifest: "infrastructure-ssh/config/webhook/manifests.yaml",
		scheme: sshScheme, webhooks: sshWebhooks},
	"metal": {crds: []string{"infrastructure-baremetal/config/crd/bases", "infrastructure-baremetal/config/crd/metal3"},
		webhookManifest: "infrastructure-baremetal/config/webhook/manifests.yaml", scheme: metalScheme, webhooks: metalWebhooks},
}

// UnlimitedCAPIReconcilers turns CAPI's ReconcilerRateLimiting gate off (a CAPI manager flag, on by
// default) for the CAPI controllers the environment runs. With it the MachineHealthCheck controller
// reconciles an MHC at most once every 15 s and the other CAPI controllers an object at most once a
// second, so every step a test waits for CAPI to take (a Node going NotReady, a Machine created or
// replaced, a Cluster deleted) waits out those intervals; CAPI's own MHC tests shorten that interval for the
// same reason. A suite calls it first in its TestMain when none of its assertions depends on the rate limit
// (every wait is for the state the controllers reach). Not for a suite that creates Machines before their
// workload cluster answers: without the gate CAPI's Machine controller backs off exponentially on "the
// connection to the workload cluster is down" and ends up waiting tens of seconds after it is up
// (yonderconfig's attached-cluster test went 6 s → 33 s). A suite that counts a provider's writes may
// use it: CAPI at full pace loads the API server, so watch events reach the provider's cache late more
// often, and a count holds only if the provider never writes from a cache behind its own last write
// (sshmachine's TestProvisioningWritesEachObjectOncePerStep found the YonderSSHHost controller doing so:
// see infrastructure-ssh/reconcilers/sshhost/written.go).
func UnlimitedCAPIReconcilers() {
	if err := feature.MutableGates.Set("ReconcilerRateLimiting=false"); err != nil {
		panic(err)
	}
}

// Main is the body of a suite's TestMain: with Gomega's Eventually defaults (timeout, polling) it runs
// the tests in the management environment opts describes (set receives it), stops the workload control
// planes the tests started, and exits.
func Main(m *testing.M, eventually, polling time.Duration, opts envtest.Options, set func(*envtest.Environment), workloads ...*Workload) {
	gomega.SetDefaultEventuallyTimeout(eventually)
	gomega.SetDefaultEventuallyPollingInterval(polling)
	code := envtest.Run(m, opts, set)
	for _, w := range workloads {
		w.Stop()
	}
	os.Exit(code)
}

// Providers returns the management environment of the infrastructure providers named (ssh, metal):
// their CRDs (Metal3's with the bare-metal provider), their types in the scheme and their webhooks served
// by the environment's manager. A provider's reconcilers run in managers of their own (StartProvider),
// which tests stop and start like crashing controllers.
func Providers(names ...string) envtest.Options {
	var o envtest.Options
	var webhooks []func(ctx context.Context, e *envtest.Environment) error
	for _, n := range names {
		p, ok := providerEnvironments[n]
		if !ok {
			panic("unknown provider " + n)
		}
		o.CRDDirectoryPaths = append(o.CRDDirectoryPaths, p.crds...)
		o.WebhookManifestPaths = append(o.WebhookManifestPaths, p.webhookManifest)
		o.AddToScheme = append(o.AddToScheme, p.scheme...)
		webhooks = append(webhooks, func(_ context.Context, e *envtest.Environment) error { return p.webhooks(e.Manager) })
	}
	o.Setup = func(ctx context.Context, e *envtest.Environment) error {
		for _, w := range webhooks {
			if err := w(ctx, e); err != nil {
				return err
			}
		}
		return nil
	}
	return o
}

// Metal3Only returns the management environment of Yonder's BareMetalHost controller alone: Metal3's
// CRDs and types, no CAPI controllers.
func Metal3Only() envtest.Options {
	return envtest.Options{
		CRDDirectoryPaths:      []string{"infrastructure-baremetal/config/crd/metal3"},
		AddToScheme:            []func(*runtime.Scheme) error{metal3v1.AddToScheme},
		WithoutCAPIControllers: true,
	}
}
