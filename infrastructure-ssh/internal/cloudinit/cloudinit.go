// Package cloudinit turns the cloud-init that Cluster API bootstrap providers emit (CABPK's kubeadm data,
// Yonder's own) into one POSIX shell script that runs the modules in cloud-init 22.4's order: bootcmd,
// write_files, disk_setup, fs_setup, mounts, users, ntp, deferred write_files, runcmd. Anything else is
// reported by name, never ignored.
package cloudinit

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
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
	// BootCmd holds each bootcmd command as a shell line.
	BootCmd    []string
	WriteFiles []WriteFile
	// Disks, Filesystems and Mounts are disk_setup, fs_setup and mounts.
	Disks       []Disk
	Filesystems []Filesystem
	Mounts      []Mount
	Users       []User
	// NTP is nil when the data has no (enabled) ntp key.
	NTP *NTP
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
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	// In a fixed order, so that of several malformed keys the same one is reported every time.
	sort.Strings(keys)
	for _, k := range keys {
		v := raw[k]
		switch k {
		case "write_files":
			b, err := yaml.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("failed to read write_files: %w", err)
			}
			if err := yaml.UnmarshalStrict(b, &cfg.WriteFiles); err != nil {
				return nil, fmt.Errorf("failed to parse write_files: %w", err)
			}
		case "runcmd", "bootcmd":
			cmds, err := parseCommands(k, v)
			if err != nil {
				return nil, err
			}
			if k == "runcmd" {
				cfg.RunCmd = cmds
			} else {
				cfg.BootCmd = cmds
			}
		case "users":
			more, err := cfg.parseUsers(v)
			if err != nil {
				return nil, err
			}
			unsupported = append(unsupported, more...)
		case "ntp", "disk_setup", "fs_setup", "mounts":
			more, err := map[string]func(any) ([]string, error){
				"ntp": cfg.parseNTP, "disk_setup": cfg.parseDiskSetup, "fs_setup": cfg.parseFSSetup, "mounts": cfg.parseMounts,
			}[k](v)
			if err != nil {
				return nil, err
			}
			unsupported = append(unsupported, more...)
		default:
			unsupported = append(unsupported, "key "+k)
		}
	}
	if err := checkWriteFiles(cfg.WriteFiles); err != nil {
		return nil, err
	}
	if len(unsupported) > 0 {
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
	// In a jinja template `{#` opens a comment, also inside a shell line or file (`${#list[@]}`): cloud-init
	// 22.4 then fails to render the template (an unclosed comment is a syntax error), logs a warning and
	// ignores the whole user data, all stages still exiting 0 (TestJinjaCommentIsRefusedAsRealCloudInitIgnoresTheData).
	// Running the data here would make a node that could never have bootstrapped under cloud-init.
	if strings.Contains(text, "{#") {
		bad = append(bad, "jinja comment {# (in a jinja template `${#var}` opens one: write the length another way, e.g. `expr length \"$var\"`)")
	}
	if len(bad) > 0 {
		return "", &UnsupportedError{Items: bad}
	}
	return text, nil
}

// parseCommands reads runcmd or bootcmd (key): strings run as shell lines, lists as quoted argument
// vectors.
func parseCommands(key string, v any) ([]string, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("failed to parse %s: not a list", key)
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
			return nil, fmt.Errorf("failed to parse %s[%d]: neither a string nor a list", key, i)
		}
		// The shell drops a NUL byte even inside quotes, so the command would not be the one written.
		if strings.ContainsRune(out[len(out)-1], 0) {
			return nil, fmt.Errorf("failed to parse %s[%d]: contains a NUL byte", key, i)
		}
	}
	return out, nil
}

// checkWriteFiles validates write_files entries.
func checkWriteFiles(files []WriteFile) error {
	for i, f := range files {
		if f.Path == "" || !path.IsAbs(f.Path) {
			return fmt.Errorf("failed to parse write_files[%d]: path %q is not absolute", i, f.Path)
		}
		// The shell drops a NUL byte even inside quotes: "/etc/a\x00b" would write /etc/ab.
		if strings.ContainsRune(f.Path, 0) {
			return fmt.Errorf("failed to parse write_files[%d]: path %q contains a NUL byte", i, f.Path)
		}
		if f.Permissions != "" && !validMode.MatchString(f.Permissions) {
			return fmt.Errorf("failed to parse write_files[%d]: permissions %q are not octal", i, f.Permissions)
		}
		if f.Owner != "" && !validOwner.MatchString(f.Owner) {
			return fmt.Errorf("failed to parse write_files[%d]: owner %q is not user[:group]", i, f.Owner)
		}
		if _, err := decode(f); err != nil {
			return fmt.Errorf("failed to decode write_files[%d] (%s): %w", i, f.Path, err)
		}
	}
	return nil
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
