// Package tools pins the developer tools (controller-gen, kustomize, golangci-lint) in their own module,
// so their dependencies never change the versions Yonder itself builds with. Run them with
// `go tool -modfile=hack/tools/go.mod <tool>` (the Makefile does).
package tools
