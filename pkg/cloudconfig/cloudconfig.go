// Package cloudconfig is the cloud-config subset Yonder's bootstrap provider renders (write_files and
// runcmd only) and the three places that run it without cloud-init: the manual join's script, the
// diskless bare-metal ramdisk (`yonder-agent provision`, action run-node) and the tests. Render lives with
// the bootstrap provider (bootstrap/internal/cloudinit); parsing and running live here once.
package cloudconfig

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/shellwrite"
)

// Header starts every cloud-config.
const Header = "#cloud-config\n"

// Config is the cloud-config subset Yonder renders and parses.
type Config struct {
	WriteFiles []WriteFile `json:"write_files"`
	RunCmd     [][]string  `json:"runcmd"`
}

// WriteFile is one write_files entry.
type WriteFile struct {
	Path        string `json:"path"`
	Owner       string `json:"owner,omitempty"`
	Permissions string `json:"permissions,omitempty"`
	Encoding    string `json:"encoding,omitempty"`
	Content     string `json:"content"`
}

// Decoded returns the file's content, base64-decoded when its encoding says so.
func (f WriteFile) Decoded() ([]byte, error) {
	if f.Encoding != "b64" && f.Encoding != "base64" {
		return []byte(f.Content), nil
	}
	raw, err := base64.StdEncoding.DecodeString(f.Content)
	if err != nil {
		return nil, fmt.Errorf("failed to decode %s: %w", f.Path, err)
	}
	return raw, nil
}

// Parse reads a cloud-config of Yonder's subset, strictly: any other module (users, packages, bootcmd…)
// is an error, because the consumers of this package run only write_files and runcmd and must not drop
// the rest silently.
func Parse(data []byte) (*Config, error) {
	if !bytes.HasPrefix(data, []byte(Header)) {
		return nil, fmt.Errorf("bootstrap data does not start with #cloud-config")
	}
	c := &Config{}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, fmt.Errorf("failed to parse cloud-config (Yonder runs only write_files and runcmd): %w", err)
	}
	return c, nil
}

// AgentConfig extracts and decodes the AgentConfig written by a cloud-config.
func (c *Config) AgentConfig() (*agentv1.AgentConfig, error) {
	for _, f := range c.WriteFiles {
		if f.Path != agentv1.DefaultPath {
			continue
		}
		raw, err := f.Decoded()
		if err != nil {
			return nil, err
		}
		return agentv1.Decode(raw)
	}
	return nil, fmt.Errorf("cloud-config writes no %s", agentv1.DefaultPath)
}

// Script turns a cloud-config of the subset into a POSIX shell script, headed by the comment lines of
// header: files first, each with its final mode and owner before any content (shellwrite), then each
// command; the first failure stops the script (set -eu).
func Script(header string, cloudConfig []byte) ([]byte, error) {
	c, err := Parse(cloudConfig)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		b.WriteString("# " + l + "\n")
	}
	b.WriteString("set -eu\numask 077\n")
	for _, f := range c.WriteFiles {
		content, err := f.Decoded()
		if err != nil {
			return nil, err
		}
		mode, owner := f.Permissions, f.Owner
		if mode == "" {
			mode = "0644"
		}
		if owner == "" {
			owner = "root:root"
		}
		shellwrite.File(&b, f.Path, mode, owner, content, false)
	}
	for _, argv := range c.RunCmd {
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = shellwrite.Quote(a)
		}
		b.WriteString(strings.Join(q, " ") + "\n")
	}
	return []byte(b.String()), nil
}
