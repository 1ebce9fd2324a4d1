package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// The rules krew applies to a manifest before it accepts it into an index or installs it (krew's
// internal/index/validation and cmd/validate-krew-manifest), written down here so the release checks the
// manifest it writes the same way.
var (
	safeName  = regexp.MustCompile(`^[\w-]+$`)
	sha256Hex = regexp.MustCompile(`^[a-f0-9]{64}$`)
	// Windows refuses these as file names; krew refuses them as plugin names.
	windowsReserved = []string{"CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
		"COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9"}
	// krewPlatforms are the os/arch pairs krew's manifest validation knows; every platform must select one.
	krewPlatforms = [][2]string{{"windows", "386"}, {"windows", "amd64"}, {"windows", "arm64"}, {"linux", "386"}, {"linux", "amd64"},
		{"linux", "arm"}, {"linux", "arm64"}, {"linux", "ppc64le"}, {"darwin", "386"}, {"darwin", "amd64"}, {"darwin", "arm64"}}
	// licenseNames are the files krew's validation accepts as the plugin's license.
	licenseNames = map[string]bool{"license": true, "license.txt": true, "license.md": true, "licenses": true,
		"licenses.txt": true, "licenses.md": true, "copying": true, "copying.txt": true}
)

// Validate checks p as krew does when the manifest is read from file (named <plugin>.yaml).
func Validate(file string, p *Plugin) error {
	if filepath.Ext(file) != ".yaml" {
		return fmt.Errorf("manifest %s: krew reads manifests named <plugin>.yaml", file)
	}
	name := strings.TrimSuffix(filepath.Base(file), ".yaml")
	var errs []error
	if p.APIVersion != APIVersion {
		errs = append(errs, fmt.Errorf("apiVersion %q: krew supports only %q", p.APIVersion, APIVersion))
	}
	if p.Kind != Kind {
		errs = append(errs, fmt.Errorf("kind %q: krew supports only %q", p.Kind, Kind))
	}
	if !safeName.MatchString(name) || isWindowsReserved(name) {
		errs = append(errs, fmt.Errorf("plugin name %q: must match %s and not be a reserved Windows name", name, safeName))
	}
	if p.Metadata.Name != name {
		errs = append(errs, fmt.Errorf("metadata.name %q: must be the file's name %q", p.Metadata.Name, name))
	}
	if p.Spec.ShortDescription == "" {
		errs = append(errs, errors.New("spec.shortDescription: must be set"))
	}
	if strings.ContainsAny(p.Spec.ShortDescription, "\r\n") {
		errs = append(errs, errors.New("spec.shortDescription: must be one line"))
	}
	if !strings.HasPrefix(p.Spec.Version, "v") {
		errs = append(errs, fmt.Errorf("spec.version %q: must be a semantic version starting with v", p.Spec.Version))
	} else if _, err := utilversion.ParseSemantic(p.Spec.Version); err != nil {
		errs = append(errs, fmt.Errorf("spec.version %q: %w", p.Spec.Version, err))
	}
	if len(p.Spec.Platforms) == 0 {
		errs = append(errs, errors.New("spec.platforms: must have at least one platform"))
	}
	for i, pl := range p.Spec.Platforms {
		if err := validatePlatform(pl); err != nil {
			errs = append(errs, fmt.Errorf("spec.platforms[%d]: %w", i, err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, validateCoverage(p.Spec.Platforms)...)
	}
	return errors.Join(errs...)
}

func isWindowsReserved(name string) bool {
	for _, r := range windowsReserved {
		if strings.EqualFold(r, name) {
			return true
		}
	}
	return false
}

func validatePlatform(p Platform) error {
	switch {
	case p.URI == "":
		return errors.New("uri: must be set")
	case p.Sha256 == "":
		return errors.New("sha256: must be set")
	case !sha256Hex.MatchString(p.Sha256):
		return fmt.Errorf("sha256 %q: must match %s", p.Sha256, sha256Hex)
	case p.Bin == "":
		return errors.New("bin: must be set")
	}
	if p.Files != nil && len(p.Files) == 0 {
		return errors.New("files: must be left out or have entries")
	}
	for j, f := range p.Files {
		if f.From == "" || f.To == "" {
			return fmt.Errorf("files[%d]: from and to must be set", j)
		}
	}
	return validateSelector(p.Selector)
}

func validateSelector(s *metav1.LabelSelector) error {
	if s == nil {
		return errors.New("selector: must be set")
	}
	if s.MatchLabels == nil && len(s.MatchExpressions) == 0 {
		return errors.New("selector: must not be empty")
	}
	if s.MatchLabels != nil && len(s.MatchLabels) == 0 {
		return errors.New("selector.matchLabels: set but empty")
	}
	if s.MatchExpressions != nil && len(s.MatchExpressions) == 0 {
		return errors.New("selector.matchExpressions: set but empty")
	}
	keys := []string{}
	for k := range s.MatchLabels {
		keys = append(keys, k)
	}
	for _, e := range s.MatchExpressions {
		keys = append(keys, e.Key)
	}
	for _, k := range keys {
		if k != "os" && k != "arch" {
			return fmt.Errorf("selector: key %q is not supported (only os and arch)", k)
		}
	}
	if _, err := metav1.LabelSelectorAsSelector(s); err != nil {
		return fmt.Errorf("selector: %w", err)
	}
	return nil
}

// validateCoverage checks that each platform selects an os/arch krew knows and that no os/arch is selected
// by two platforms (krew could not choose).
func validateCoverage(platforms []Platform) []error {
	var errs []error
	sels := make([]labels.Selector, len(platforms))
	for i, p := range platforms {
		sels[i], _ = metav1.LabelSelectorAsSelector(p.Selector)
		matched := false
		for _, pair := range krewPlatforms {
			matched = matched || sels[i].Matches(labels.Set{"os": pair[0], "arch": pair[1]})
		}
		if !matched {
			errs = append(errs, fmt.Errorf("spec.platforms[%d]: selector %s matches no platform krew supports", i, sels[i]))
		}
	}
	for _, pair := range krewPlatforms {
		var idx []int
		for i, s := range sels {
			if s.Matches(labels.Set{"os": pair[0], "arch": pair[1]}) {
				idx = append(idx, i)
			}
		}
		if len(idx) > 1 {
			errs = append(errs, fmt.Errorf("spec.platforms %v: overlapping selectors, all select %s/%s", idx, pair[0], pair[1]))
		}
	}
	return errs
}

// ValidateArchive checks what `krew install --manifest … --archive …` needs of platform p's archive at
// path: its sha256 is p's, the files operations find something, the bin is among what they install and
// is executable, and a license file comes along.
func ValidateArchive(p Platform, path string) error {
	sum, err := fileSHA256(path)
	if err != nil {
		return err
	}
	if sum != p.Sha256 {
		return fmt.Errorf("archive %s has sha256 %s, the manifest says %s", path, sum, p.Sha256)
	}
	files, err := archiveFiles(path)
	if err != nil {
		return err
	}
	installed := map[string]bool{}
	for _, op := range p.Files {
		n := 0
		for f := range files {
			if ok, _ := filepath.Match(filepath.Clean(op.From), f); ok {
				installed[filepath.Join(op.To, filepath.Base(f))] = true
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("archive %s: files entry from %q matches nothing", path, op.From)
		}
	}
	if p.Files == nil {
		for f := range files {
			installed[f] = true
		}
	}
	if !installed[filepath.Clean(p.Bin)] {
		return fmt.Errorf("archive %s: bin %q is not installed by the files operations", path, p.Bin)
	}
	var license bool
	for f := range installed {
		license = license || licenseNames[strings.ToLower(filepath.Base(f))]
	}
	if !license {
		return fmt.Errorf("archive %s: no LICENSE file is installed (krew requires one)", path)
	}
	for f, mode := range files {
		if filepath.Base(f) == filepath.Base(p.Bin) && mode&0o111 == 0 {
			return fmt.Errorf("archive %s: %s is not executable", path, f)
		}
	}
	return nil
}
