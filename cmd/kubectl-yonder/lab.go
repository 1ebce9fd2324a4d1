//go:build !release

package main

import "github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/lab"

// The lab is a developer tool: it runs the repository's test harness (test/stack) and finds the checkout,
// so only a plugin built from a checkout has it; `make release` builds with -tags release, without it.
func init() { developerCommands = append(developerCommands, lab.NewCommand) }
