package harness

import (
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
)

var (
	sshScheme   = []func(*runtime.Scheme) error{infrav1.AddToScheme}
	sshWebhooks = setup.SetupWebhooks
)
