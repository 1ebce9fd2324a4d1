package enrol

import (
	"os"
	"testing"

	"github.com/yonder-dev/yonder/test/envtest"
	"github.com/yonder-dev/yonder/test/harness"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, harness.Metal3Only(), func(e *envtest.Environment) { env = e }))
}
