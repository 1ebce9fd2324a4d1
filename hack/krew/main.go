// Command krew makes kubectl-yonder's krew distribution for `make release`:
//
//	go run ./hack/krew archive -bin BIN -license LICENSE -out DIR/kubectl-yonder_<os>_<arch>.tar.gz
//	go run ./hack/krew manifest -version v0.1.0 -uri-prefix https://…/download/v0.1.0 -out DIR/yonder.yaml DIR/kubectl-yonder_*.tar.gz
//
// manifest writes one platform per archive with the archive's real sha256, then checks the manifest and
// every archive with krew's rules, so a release never ships a manifest krew would refuse.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: krew archive|manifest FLAGS…")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	switch args[0] {
	case "archive":
		bin := fs.String("bin", "", "the plugin binary")
		license := fs.String("license", "LICENSE", "the license file")
		out := fs.String("out", "", "the archive to write (kubectl-yonder_<os>_<arch>.tar.gz)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *bin == "" || *out == "" {
			return fmt.Errorf("archive needs -bin and -out")
		}
		return WriteArchive(*out, *bin, *license)
	case "manifest":
		version := fs.String("version", "", "the release's version (v0.1.0)")
		prefix := fs.String("uri-prefix", "", "URL the archives are downloaded from (the release's download URL)")
		out := fs.String("out", "yonder.yaml", "where to write the manifest (its file name must be yonder.yaml)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return writeManifest(*version, *prefix, *out, fs.Args())
	}
	return fmt.Errorf("unknown subcommand %q: use archive or manifest", args[0])
}

func writeManifest(version, prefix, out string, archives []string) error {
	if version == "" || prefix == "" || len(archives) == 0 {
		return fmt.Errorf("manifest needs -version, -uri-prefix and at least one archive")
	}
	p, err := Build(version, prefix, archives)
	if err != nil {
		return err
	}
	if err := Validate(out, p); err != nil {
		return err
	}
	for _, a := range archives {
		if err := ValidateArchive(platformOf(p, a), a); err != nil {
			return err
		}
	}
	data, err := yaml.Marshal(p)
	if err != nil {
		return fmt.Errorf("failed to encode the manifest: %w", err)
	}
	return os.WriteFile(out, data, 0o644) //nolint:gosec // the manifest is published with the release: world-readable
}

// platformOf is the platform built from archive a.
func platformOf(p *Plugin, a string) Platform {
	for _, pl := range p.Spec.Platforms {
		if filepath.Base(pl.URI) == filepath.Base(a) {
			return pl
		}
	}
	return Platform{}
}
