// Package cloudinit turns the subset of cloud-init that Cluster API bootstrap providers emit (CABPK's
// kubeadm data, Yonder's own) into one POSIX shell script: write_files (content, encoding b64 / gzip /
// gzip+b64, permissions, owner, append) and runcmd. Anything else is reported, never ignored.
package cloudinit

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/yonder-dev/yonder/pkg/shellwrite"
)

// UnsupportedError lists what the data uses that this executor does not run.
type UnsupportedError struct {
	Items []string
}

func (e *UnsupportedError) Error() string {
	return "unsupported cloud-init: " + strings.Join(e.Items, ", ")
}

// WriteFile is one write_files entry.
type WriteFile struct {
	Path        string `json:"path"`
	Content     string `json:"content"`
	Encoding    string `json:"encoding"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Append      bool   `json:"append"`
	Defer       bool   `json:"defer"`
}

// Config is the supported subset.
type Config struct {
	WriteFiles []WriteFile
	// RunCmd holds each command as a shell line.
	RunCmd []string
}

// Options tunes Parse.
type Options struct {
	// Hostname replaces the jinja expressions {{ ds.meta_data.local_hostname }}, {{ ds.meta_data.hostname }},
	// {{ v1.local_hostname }} and {{ local_hostname }} when the data is a jinja template.
	Hostname string
}

var (
	jinjaExpr     = regexp.MustCompile(`\{\{-?\s*([^}]*?)\s*-?\}\}`)
	hostnameNames = map[string]bool{"ds.meta_data.local_hostname": true, "ds.meta_data.hostname": true, "v1.local_hostname": true, "local_hostname": true, "v1.hostname": true}
	validMode     = regexp.MustCompile(`^0?[0-7]{3,4}$`)
	validOwner    = regexp.MustCompile(`^[a-z_][a-z0-9_.-]*(:[a-z_][a-z0-9_.-]*)?$`)
)

// Parse parses cloud-config user data.
func Parse(data []byte, opts Options) (*Config, error) {
	text, err := renderTemplate(string(data), opts)
	if err != nil {
		return nil, err
	}
	raw := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("failed to parse cloud-config: %w", err)
	}
	cfg := &Config{}
	var unsupported []string
	for k, v := range raw {
		switch k {
		case "write_files":
			b, err := yaml.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("failed to read write_files: %w", err)
			}
			if err := yaml.UnmarshalStrict(b, &cfg.WriteFiles); err != nil {
				return nil, fmt.Errorf("failed to parse write_files: %w", err)
			}
		case "runcmd":
			if cfg.RunCmd, err = parseRunCmd(v); err != nil {
				return nil, err
			}
		default:
			unsupported = append(unsupported, "key "+k)
		}
	}
	more, err := checkWriteFiles(cfg.WriteFiles)
	if err != nil {
		return nil, err
	}
	if unsupported = append(unsupported, more...); len(unsupported) > 0 {
		sort.Strings(unsupported)
		return nil, &UnsupportedError{Items: unsupported}
	}
	return cfg, nil
}

// renderTemplate checks that text is #cloud-config and renders a jinja template header's hostname
// expressions (the only ones CABPK's data uses); anything else jinja is unsupported.
func renderTemplate(text string, opts Options) (string, error) {
	lines := strings.SplitN(text, "\n", 3)
	jinja := false
	if len(lines) > 0 && strings.HasPrefix(strings.TrimSpace(lines[0]), "## template:") {
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[0]), "## template:")) != "jinja" {
			return "", &UnsupportedError{Items: []string{"template " + strings.TrimSpace(lines[0])}}
		}
		jinja = true
		text = strings.Join(lines[1:], "\n")
	}
	if !strings.HasPrefix(strings.TrimLeft(text, " \t\r\n"), "#cloud-config") {
		return "", &UnsupportedError{Items: []string{"data that is not #cloud-config (scripts, MIME multipart and ignition are not executed)"}}
	}
	if !jinja {
		return text, nil
	}
	var bad []string
	text = jinjaExpr.ReplaceAllStringFunc(text, func(m string) string {
		expr := strings.TrimSpace(jinjaExpr.FindStringSubmatch(m)[1])
		if hostnameNames[expr] && opts.Hostname != "" {
			return opts.Hostname
		}
		bad = append(bad, "jinja expression {{ "+expr+" }}")
		return m
	})
	if strings.Contains(text, "{%") {
		bad = append(bad, "jinja statements {% … %}")
	}
	if len(bad) > 0 {
		return "", &UnsupportedError{Items: bad}
	}
	return text, nil
}

// parseRunCmd reads runcmd: strings run as shell lines, lists as quoted argument vectors.
func parseRunCmd(v any) ([]string, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, errors.New("failed to parse runcmd: not a list")
	}
	var out []string
	for i, it := range items {
		switch c := it.(type) {
		case string:
			out = append(out, c)
		case []any:
			parts := make([]string, 0, len(c))
			for _, p := range c {
				parts = append(parts, shellwrite.Quote(fmt.Sprint(p)))
			}
			out = append(out, strings.Join(parts, " "))
		case bool, float64, int64, int:
			// YAML reads `- true` as a boolean; cloud-init runs it as the command it spells.
			out = append(out, fmt.Sprint(c))
		default:
			return nil, fmt.Errorf("failed to parse runcmd[%d]: neither a string nor a list", i)
		}
	}
	return out, nil
}

// checkWriteFiles validates write_files entries; it returns the features they use that are not
// executed.
func checkWriteFiles(files []WriteFile) ([]string, error) {
	var unsupported []string
	for i, f := range files {
		if f.Path == "" || !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("failed to parse write_files[%d]: path %q is not absolute", i, f.Path)
		}
		// The shell drops a NUL byte even inside quotes: "/etc/a\x00b" would write /etc/ab.
		if strings.ContainsRune(f.Path, 0) {
			return nil, fmt.Errorf("failed to parse write_files[%d]: path %q contains a NUL byte", i, f.Path)
		}
		if f.Permissions != "" && !validMode.MatchString(f.Permissions) {
			return nil, fmt.Errorf("failed to parse write_files[%d]: permissions %q are not octal", i, f.Permissions)
		}
		if f.Owner != "" && !validOwner.MatchString(f.Owner) {
			return nil, fmt.Errorf("failed to parse write_files[%d]: owner %q is not user[:group]", i, f.Owner)
		}
		if _, err := decode(f); err != nil {
			return nil, fmt.Errorf("failed to decode write_files[%d] (%s): %w", i, f.Path, err)
		}
		if f.Defer {
			unsupported = append(unsupported, "write_files[].defer")
		}
	}
	return unsupported, nil
}

// decode returns the file content in clear.
func decode(f WriteFile) ([]byte, error) {
	switch strings.ToLower(f.Encoding) {
	case "", "text/plain":
		return []byte(f.Content), nil
	case "b64", "base64":
		return base64.StdEncoding.DecodeString(strings.TrimSpace(f.Content))
	case "gz", "gzip":
		return gunzip([]byte(f.Content))
	case "gz+b64", "gzip+b64", "gz+base64", "gzip+base64":
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(f.Content))
		if err != nil {
			return nil, err
		}
		return gunzip(b)
	default:
		return nil, fmt.Errorf("unknown encoding %q", f.Encoding)
	}
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	// Bootstrap files are small; bound the output so hostile data cannot balloon.
	out, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Script renders the config as a POSIX shell script. Files are written first (any failure aborts), then
// the runcmd lines run in order as cloud-init runs them: in one script, a failing command does not stop
// the next, and the script's status is the last command's.
//
// The runcmd lines are handed to eval as one quoted string, not pasted into the script: a line of the
// data (an unbalanced `(` or `}`, an unterminated quote) then cannot make the whole script unparseable
// or close the function early and run the rest outside it. As in cloud-init's own runcmd script (a
// file of these lines run by /bin/sh), the lines before a syntax error run and the error ends the
// script with status 2, and a construct may span lines (`if …; then`, `fi`).
func (c *Config) Script() string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# Generated by yonder-ssh-manager from cloud-init user data.\numask 022\n(\nset -e\n")
	for _, f := range c.WriteFiles {
		content, _ := decode(f) // validated by Parse
		mode := f.Permissions
		if mode == "" {
			mode = "0644"
		}
		owner := f.Owner
		if owner == "" {
			owner = "root:root"
		}
		shellwrite.File(&b, f.Path, mode, owner, content, f.Append)
	}
	b.WriteString(") || { echo 'yonder-ssh: write_files failed' >&2; exit 97; }\n")
	b.WriteString("runcmd() {\n:\n")
	if len(c.RunCmd) > 0 {
		b.WriteString("eval " + shellwrite.Quote(strings.Join(c.RunCmd, "\n")) + "\n")
	}
	b.WriteString("}\nruncmd\n")
	return b.String()
}
