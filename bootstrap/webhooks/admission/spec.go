package admission

import (
	"path"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

// defaultSpec fills defaults that make the stored object say what will happen.
func defaultSpec(s *bootstrapv1.YonderConfigSpec) {
	if s.GPU.Mode == "" {
		s.GPU.Mode = string(agentv1.GPUModeNone)
	}
	if s.BootstrapToken.TTLSeconds == 0 {
		s.BootstrapToken.TTLSeconds = bootstrapv1.DefaultTokenTTLSeconds
	}
}

// validateSpec checks what the CRD schema cannot: combinations, label syntax, paths, digests. The
// same rules as the AgentConfig the spec is rendered into, so a YonderConfig that is admitted renders.
func validateSpec(s *bootstrapv1.YonderConfigSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Agent.URL != "" || s.Agent.Path != "" || s.Agent.SHA256 != "" {
		errs = append(errs, agentv1.ValidateSource(s.Agent.URL, s.Agent.Path, s.Agent.SHA256, p.Child("agent"))...)
	}
	errs = append(errs, agentv1.ValidateLabels(s.NodeLabels, p.Child("nodeLabels"))...)
	taints := make([]agentv1.Taint, 0, len(s.NodeTaints))
	for _, t := range s.NodeTaints {
		taints = append(taints, agentv1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	errs = append(errs, agentv1.ValidateTaints(taints, p.Child("nodeTaints"))...)
	args := make([]agentv1.Arg, 0, len(s.KubeletExtraArgs))
	for _, a := range s.KubeletExtraArgs {
		args = append(args, agentv1.Arg{Name: a.Name, Value: a.Value})
	}
	errs = append(errs, agentv1.ValidateArgs(args, p.Child("kubeletExtraArgs"))...)
	if s.Site != "" {
		for _, m := range validation.IsDNS1123Subdomain(s.Site) {
			errs = append(errs, field.Invalid(p.Child("site"), s.Site, m))
		}
	}
	errs = append(errs, validateImages(s.Images, p.Child("images"))...)
	rp := p.Child("rootfs")
	if s.Rootfs.Image != "" && s.Rootfs.Archive != nil {
		errs = append(errs, field.Forbidden(rp, "set at most one of image and archive"))
	}
	if s.Rootfs.Image != "" && !agentv1.ImageDigestRE.MatchString(s.Rootfs.Image) {
		errs = append(errs, field.Invalid(rp.Child("image"), s.Rootfs.Image, "must be pinned by digest: <registry>/<repository>@sha256:<64 hex> (or leave it empty: the node image of the Machine's version from spec.images)"))
	}
	if a := s.Rootfs.Archive; a != nil {
		errs = append(errs, agentv1.ValidateSource(a.URL, a.Path, a.SHA256, rp.Child("archive"))...)
	}
	for i, a := range s.Artifacts {
		errs = append(errs, agentv1.ValidateSource(a.URL, a.Path, a.SHA256, p.Child("artifacts").Index(i))...)
	}
	errs = append(errs, agentv1.ValidateGPUMode(agentv1.GPUMode(s.GPU.Mode), p.Child("gpu", "mode"))...)
	for i, f := range s.Files {
		fp := p.Child("files").Index(i)
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			errs = append(errs, field.Invalid(fp.Child("path"), f.Path, "must be an absolute, clean path"))
		}
		if f.Content != "" && f.ContentFrom != nil {
			errs = append(errs, field.Forbidden(fp.Child("contentFrom"), "set only one of content and contentFrom"))
		}
		if f.ContentFrom != nil {
			for _, m := range validation.IsDNS1123Subdomain(f.ContentFrom.Name) {
				errs = append(errs, field.Invalid(fp.Child("contentFrom", "name"), f.ContentFrom.Name, m))
			}
		}
	}
	for i, c := range s.PreCommands {
		if c == "" {
			errs = append(errs, field.Required(p.Child("preCommands").Index(i), "must not be empty"))
		}
	}
	for i, c := range s.PostCommands {
		if c == "" {
			errs = append(errs, field.Required(p.Child("postCommands").Index(i), "must not be empty"))
		}
	}
	return errs
}

// validateImages checks the Secret names and the mirrored registries.
func validateImages(im bootstrapv1.Images, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for f, n := range map[string]string{"pullSecretName": im.PullSecretName, "caSecretName": im.CASecretName} {
		if n == "" {
			continue
		}
		for _, m := range validation.IsDNS1123Subdomain(n) {
			errs = append(errs, field.Invalid(p.Child(f), n, m))
		}
	}
	for i, m := range im.MirrorOf {
		if es := agentv1.ValidateRegistry(agentv1.Registry{Host: m}, p.Child("mirrorOf").Index(i)); len(es) > 0 {
			errs = append(errs, field.Invalid(p.Child("mirrorOf").Index(i), m, "must be a registry host[:port], e.g. ghcr.io"))
		}
	}
	return errs
}
