package osimage

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// aptMirror finds the archive apt on this machine uses for Suite's main component, in sources.list,
// sources.list.d/*.list (one-line format) and sources.list.d/*.sources (deb822): the machine may reach
// no other mirror.
func aptMirror(etcApt string) (string, error) {
	files := []string{filepath.Join(etcApt, "sources.list")}
	for _, pattern := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(etcApt, "sources.list.d", pattern))
		files = append(files, m...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f) //nolint:gosec // apt's sources
		if err != nil {
			continue
		}
		var uri string
		if strings.HasSuffix(f, ".sources") {
			uri = mirrorFromDeb822(string(b))
		} else {
			uri = mirrorFromOneLine(string(b))
		}
		if uri != "" {
			return strings.TrimSuffix(uri, "/"), nil
		}
	}
	return "", fmt.Errorf("osimage: no apt source in %s serves %s main (set Options.Mirror)", etcApt, Suite)
}

// mirrorFromOneLine reads "deb [options] URI suite component…" lines.
func mirrorFromOneLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if len(fields) > 0 && strings.HasPrefix(fields[0], "[") {
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) > 0 {
				fields = fields[1:]
			}
		}
		if len(fields) >= 3 && fields[1] == Suite && slices.Contains(fields[2:], "main") {
			return fields[0]
		}
	}
	return ""
}

// mirrorFromDeb822 reads stanzas of "Types:", "URIs:", "Suites:", "Components:" fields.
func mirrorFromDeb822(s string) string {
	for _, stanza := range strings.Split(strings.ReplaceAll(s, "\r", ""), "\n\n") {
		fields := map[string][]string{}
		enabled := true
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			key := strings.ToLower(strings.TrimSpace(k))
			fields[key] = strings.Fields(v)
			if key == "enabled" && strings.EqualFold(strings.TrimSpace(v), "no") {
				enabled = false
			}
		}
		if enabled && slices.Contains(fields["types"], "deb") && slices.Contains(fields["suites"], Suite) &&
			slices.Contains(fields["components"], "main") && len(fields["uris"]) > 0 {
			return fields["uris"][0]
		}
	}
	return ""
}
