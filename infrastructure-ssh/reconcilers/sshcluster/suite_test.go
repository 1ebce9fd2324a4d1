package sshcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/harness"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	o := harness.Providers("ssh")
	webhooks := o.Setup
	o.Setup = func(ctx context.Context, e *envtest.Environment) error {
		if err := webhooks(ctx, e); err != nil {
			return err
		}
		return setup.SetupReconcilers(ctx, e.Manager, setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}, ProbeInterval: time.Hour})
	}
	harness.Main(m, 60*time.Second, 200*time.Millisecond, o, func(e *envtest.Environment) { env = e })
}
