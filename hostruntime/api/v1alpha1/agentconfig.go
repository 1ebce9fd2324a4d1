package v1alpha1

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

var (
	tokenRE       = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	sha256RE      = regexp.MustCompile(`^[a-f0-9]{64}$`)
	versionRE     = regexp.MustCompile(`^v\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]+)?$`)
	permissionsRE = regexp.MustCompile(`^0?[0-7]{3,4}$`)
	ownerRE       = regexp.MustCompile(`^[a-z_][a-z0-9_.-]*(:[a-z_][a-z0-9_.-]*)?$`)
	argNameRE     = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9-_.]*$`)
)

// Decode parses an AgentConfig strictly (unknown or duplicate fields are errors), checks apiVersion and
// kind, and validates it. Errors name the offending field path.
//
// A number or boolean where a string belongs is an error, not converted: yaml.UnmarshalStrict would read
// an unquoted `permissions: 0644` as the YAML 1.1 octal 420 and hand the agent the mode "420" (r---w----,
// which passes validation), `content: 1e3` as "1000" and a label value `on` as "true". Quoting the
// value (as Encode does) is the fix the error asks for.
func Decode(data []byte) (*AgentConfig, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("failed to decode AgentConfig: %w", err)
	}
	c := &AgentConfig{}
	d := json.NewDecoder(bytes.NewReader(j))
	d.DisallowUnknownFields()
	if err := d.Decode(c); err != nil {
		return nil, fmt.Errorf("failed to decode AgentConfig: %w", err)
	}
	if err := c.Validate().ToAggregate(); err != nil {
		return nil, fmt.Errorf("invalid AgentConfig: %w", err)
	}
	return c, nil
}

// Encode validates c and renders it as YAML with apiVersion and kind set.
func Encode(c *AgentConfig) ([]byte, error) {
	out := *c
	out.APIVersion, out.Kind = APIVersion, Kind
	if err := out.Validate().ToAggregate(); err != nil {
		return nil, fmt.Errorf("invalid AgentConfig: %w", err)
	}
	return yaml.Marshal(&out)
}

// Validate checks every field and returns all problems with their field paths.
func (c *AgentConfig) Validate() field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), c.APIVersion, []string{APIVersion}))
	}
	if c.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), c.Kind, []string{Kind}))
	}
	if c.NodeName == "" {
		errs = append(errs, field.Required(field.NewPath("nodeName"), ""))
	} else {
		for _, m := range validation.IsDNS1123Subdomain(c.NodeName) {
			errs = append(errs, field.Invalid(field.NewPath("nodeName"), c.NodeName, m))
		}
	}
	if !versionRE.MatchString(c.KubernetesVersion) {
		errs = append(errs, field.Invalid(field.NewPath("kubernetesVersion"), c.KubernetesVersion, "must look like v1.36.3"))
	}
	errs = append(errs, validateAPIServer(c.APIServer, field.NewPath("apiServer"))...)
	if !tokenRE.MatchString(c.BootstrapToken) {
		// Never echo the value: it is a credential.
		errs = append(errs, field.Invalid(field.NewPath("bootstrapToken"), "<redacted>", "must be a bootstrap token of the form [a-z0-9]{6}.[a-z0-9]{16}"))
	}
	errs = append(errs, ValidateLabels(c.Labels, field.NewPath("labels"))...)
	errs = append(errs, ValidateTaints(c.Taints, field.NewPath("taints"))...)
	errs = append(errs, ValidateArgs(c.KubeletExtraArgs, field.NewPath("kubeletExtraArgs"))...)
	if c.Site != "" {
		for _, m := range validation.IsDNS1123Subdomain(c.Site) {
			errs = append(errs, field.Invalid(field.NewPath("site"), c.Site, m))
		}
	}
	errs = append(errs, validateRootfs(c.Rootfs, c.Registry, field.NewPath("rootfs"))...)
	if c.Registry != nil {
		errs = append(errs, ValidateRegistry(*c.Registry, field.NewPath("registry"))...)
	}
	names := map[string]bool{}
	for i, a := range c.Artifacts {
		p := field.NewPath("artifacts").Index(i)
		errs = append(errs, ValidateArtifact(a, p)...)
		if names[a.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), a.Name))
		}
		names[a.Name] = true
	}
	errs = append(errs, ValidateGPUMode(c.GPU.Mode, field.NewPath("gpu", "mode"))...)
	paths := map[string]bool{}
	for i, f := range c.Files {
		p := field.NewPath("files").Index(i)
		errs = append(errs, validateFile(f, p)...)
		if paths[f.Path] {
			errs = append(errs, field.Duplicate(p.Child("path"), f.Path))
		}
		paths[f.Path] = true
	}
	for i, cmd := range c.PreCommands {
		if cmd == "" {
			errs = append(errs, field.Required(field.NewPath("preCommands").Index(i), "must not be empty"))
		}
	}
	for i, cmd := range c.PostCommands {
		if cmd == "" {
			errs = append(errs, field.Required(field.NewPath("postCommands").Index(i), "must not be empty"))
		}
	}
	return errs
}

// ImageDigestRE matches an image reference pinned by digest.
var ImageDigestRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+@sha256:[a-f0-9]{64}$`)

func validateRootfs(r Rootfs, reg *Registry, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Image != "" && r.Archive != nil {
		errs = append(errs, field.Forbidden(p, "set at most one of image and archive"))
	}
	if r.Image != "" && !ImageDigestRE.MatchString(r.Image) {
		errs = append(errs, field.Invalid(p.Child("image"), r.Image, "must be a reference pinned by digest: <registry>/<repository>@sha256:<64 hex>"))
	}
	if r.Image != "" && reg != nil && !strings.HasPrefix(r.Image, reg.Host+"/") {
		errs = append(errs, field.Invalid(p.Child("image"), r.Image, "must be in registry.host "+reg.Host))
	}
	if r.Archive != nil {
		errs = append(errs, ValidateArtifact(*r.Archive, p.Child("archive"))...)
	}
	return errs
}

// hostRE matches a registry host[:port].
var hostRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$`)

// ValidateRegistry checks a registry block; the password is never echoed.
func ValidateRegistry(r Registry, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !hostRE.MatchString(r.Host) {
		errs = append(errs, field.Invalid(p.Child("host"), r.Host, "must be a registry host[:port], e.g. registry.example:5000"))
	}
	if r.CACertificate != "" && !strings.Contains(r.CACertificate, "-----BEGIN CERTIFICATE-----") {
		errs = append(errs, field.Invalid(p.Child("caCertificate"), "<PEM>", "must be a PEM certificate bundle"))
	}
	if (r.Username == "") != (r.Password == "") {
		errs = append(errs, field.Invalid(p.Child("username"), r.Username, "set username and password together"))
	}
	for i, m := range r.MirrorOf {
		if !hostRE.MatchString(m) || m == r.Host {
			errs = append(errs, field.Invalid(p.Child("mirrorOf").Index(i), m, "must be an upstream registry host other than host"))
		}
	}
	return errs
}

func validateAPIServer(a APIServer, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	u, err := url.Parse(a.Endpoint)
	if a.Endpoint == "" {
		errs = append(errs, field.Required(p.Child("endpoint"), ""))
	} else if err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, field.Invalid(p.Child("endpoint"), a.Endpoint, "must be an https:// URL"))
	}
	rest := []byte(a.CACertificate)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			errs = append(errs, field.Invalid(p.Child("caCertificate"), "<pem>", fmt.Sprintf("certificate %d does not parse: %v", n, err)))
		}
		n++
	}
	if n == 0 {
		errs = append(errs, field.Required(p.Child("caCertificate"), "must contain at least one PEM certificate"))
	}
	return errs
}

// ValidateLabels checks Node label keys and values.
func ValidateLabels(labels map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, m := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(p.Key(k), k, m))
		}
		for _, m := range validation.IsValidLabelValue(labels[k]) {
			errs = append(errs, field.Invalid(p.Key(k), labels[k], m))
		}
	}
	return errs
}

// ValidateTaints checks taint keys, values and effects.
func ValidateTaints(taints []Taint, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range taints {
		tp := p.Index(i)
		for _, m := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(tp.Child("key"), t.Key, m))
		}
		for _, m := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, field.Invalid(tp.Child("value"), t.Value, m))
		}
		switch t.Effect {
		case "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			errs = append(errs, field.NotSupported(tp.Child("effect"), t.Effect, []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}))
		}
	}
	return errs
}

// ValidateArgs checks command line flags.
func ValidateArgs(args []Arg, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, a := range args {
		if !argNameRE.MatchString(a.Name) {
			errs = append(errs, field.Invalid(p.Index(i).Child("name"), a.Name, "must be a flag name without leading dashes"))
		}
	}
	return errs
}

// ValidateArtifact checks one artifact.
func ValidateArtifact(a Artifact, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if a.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	errs = append(errs, ValidateSource(a.URL, a.Path, a.SHA256, p)...)
	return errs
}

// ValidateSource checks a URL-or-path plus sha256 pair.
func ValidateSource(rawURL, localPath, sha string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case rawURL == "" && localPath == "":
		errs = append(errs, field.Required(p.Child("url"), "set url or path"))
	case rawURL != "" && localPath != "":
		errs = append(errs, field.Forbidden(p.Child("path"), "set only one of url and path"))
	case rawURL != "":
		u, err := url.Parse(rawURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("url"), rawURL, "must be an http:// or https:// URL"))
		}
	default:
		if !path.IsAbs(localPath) {
			errs = append(errs, field.Invalid(p.Child("path"), localPath, "must be absolute"))
		}
	}
	if !sha256RE.MatchString(sha) {
		errs = append(errs, field.Invalid(p.Child("sha256"), sha, "must be 64 lowercase hex characters"))
	}
	return errs
}

// ValidateGPUMode checks a GPU mode ("" means None).
func ValidateGPUMode(m GPUMode, p *field.Path) field.ErrorList {
	switch m {
	case "", GPUModeNone, GPUModeAuto, GPUModeNVIDIA, GPUModeAMD:
		return nil
	}
	return field.ErrorList{field.NotSupported(p, m, []GPUMode{GPUModeNone, GPUModeAuto, GPUModeNVIDIA, GPUModeAMD})}
}

func validateFile(f File, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
		errs = append(errs, field.Invalid(p.Child("path"), f.Path, "must be an absolute, clean path"))
	}
	switch f.Encoding {
	case "":
	case "base64":
		if _, err := base64.StdEncoding.DecodeString(f.Content); err != nil {
			errs = append(errs, field.Invalid(p.Child("content"), "<content>", "is not valid base64"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("encoding"), f.Encoding, []string{"", "base64"}))
	}
	if f.Permissions != "" && !permissionsRE.MatchString(f.Permissions) {
		errs = append(errs, field.Invalid(p.Child("permissions"), f.Permissions, "must be octal, e.g. 0644"))
	}
	if f.Owner != "" && !ownerRE.MatchString(f.Owner) {
		errs = append(errs, field.Invalid(p.Child("owner"), f.Owner, `must be "user" or "user:group"`))
	}
	return errs
}
