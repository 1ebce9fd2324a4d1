package machine

import (
	"os"
	"testing"

	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, envtest.Options{WithoutCAPIControllers: true}, func(e *envtest.Environment) { env = e }))
}
