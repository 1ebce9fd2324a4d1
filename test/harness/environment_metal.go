package harness

import (
	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
)

var (
	metalScheme   = []func(*runtime.Scheme) error{infrav1.AddToScheme, metal3v1.AddToScheme}
	metalWebhooks = setup.SetupWebhooks
)
