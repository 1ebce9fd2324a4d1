package sshhost_test

import (
	"context"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/harness"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	o := harness.Providers("ssh")
	o.WithoutCAPIControllers = true
	o.Setup = withReconcilers(o.Setup, setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}, ProbeInterval: time.Second,
		Dialer: sshexec.SSHDialer{Timeout: 3 * time.Second}})
	harness.Main(m, 60*time.Second, 200*time.Millisecond, o, func(e *envtest.Environment) { env = e })
}

// withReconcilers runs the provider's reconcilers in the environment's manager, after its webhooks.
func withReconcilers(webhooks func(context.Context, *envtest.Environment) error, o setup.Options) func(context.Context, *envtest.Environment) error {
	return func(ctx context.Context, e *envtest.Environment) error {
		if err := webhooks(ctx, e); err != nil {
			return err
		}
		return setup.SetupReconcilers(ctx, e.Manager, o)
	}
}
