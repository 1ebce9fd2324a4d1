package sshhost_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	os.Exit(envtest.Run(m, envtest.Options{
		CRDDirectoryPaths:      []string{"infrastructure-ssh/config/crd/bases"},
		WebhookManifestPaths:   []string{"infrastructure-ssh/config/webhook/manifests.yaml"},
		AddToScheme:            []func(*runtime.Scheme) error{infrav1.AddToScheme},
		WithoutCAPIControllers: true,
		Setup: func(ctx context.Context, e *envtest.Environment) error {
			if err := setup.SetupWebhooks(e.Manager); err != nil {
				return err
			}
			return setup.SetupReconcilers(ctx, e.Manager, setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}, ProbeInterval: time.Second,
				Dialer: sshexec.SSHDialer{Timeout: 3 * time.Second}})
		},
	}, func(e *envtest.Environment) { env = e }))
}
