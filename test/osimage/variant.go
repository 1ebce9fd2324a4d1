package osimage

// A variant is the cloud image with more on top, as an image pipeline (image-builder) makes a node image
// from a distribution's cloud image: more Debian packages (Options.ExtraPackages), files written over the
// configured tree (Options.Files) and units enabled (Options.EnabledUnits). The default image is the
// empty variant, and its cache keys, root UUID and tree are exactly what they were before variants
// existed: machines that cached it keep using it.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strings"
)

// debianPackageName is Debian policy's package name syntax (§5.6.1). It also keeps a name from carrying
// debootstrap's list separator (a comma) into --include.
var debianPackageName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

// unitName is a systemd unit's file name: the characters systemd allows, a type suffix, and no slash, so
// the enabling link stays in the wants directory.
var unitName = regexp.MustCompile(`^[A-Za-z0-9:_.@\\-]+\.[a-z]+$`)

// emptyVariant reports whether o is the default image.
func (o Options) emptyVariant() bool {
	return len(o.ExtraPackages) == 0 && len(o.Files) == 0 && len(o.EnabledUnits) == 0
}

// validateVariant checks the variant before anything is built: a bad package name would otherwise fail
// debootstrap minutes in, and a missing Source file after the tree is made.
func (o Options) validateVariant() error {
	for _, p := range o.ExtraPackages {
		if !debianPackageName.MatchString(p) {
			return fmt.Errorf("osimage: ExtraPackages: %q is not a Debian package name", p)
		}
	}
	seen := map[string]bool{}
	for _, f := range o.Files {
		if err := f.validate(); err != nil {
			return fmt.Errorf("osimage: Files: %w", err)
		}
		if seen[f.Path] {
			return fmt.Errorf("osimage: Files: %s is given twice", f.Path)
		}
		seen[f.Path] = true
	}
	for _, u := range o.EnabledUnits {
		if !unitName.MatchString(u) {
			return fmt.Errorf("osimage: EnabledUnits: %q is not a systemd unit name", u)
		}
	}
	return nil
}

// validate checks one file for an image or a copy: a clean absolute path other than the root, permission
// bits only (no setuid, no file type), and at most one of Content and Source, a regular file named by an
// absolute path.
func (f File) validate() error {
	if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
		return fmt.Errorf("file path %q is not a clean absolute path", f.Path)
	}
	if f.Mode&^os.ModePerm != 0 {
		return errors.New("file " + f.Path + " has more than permission bits in its mode")
	}
	if f.Source == "" {
		return nil
	}
	if f.Content != nil {
		return fmt.Errorf("file %s has both Content and Source", f.Path)
	}
	if !path.IsAbs(f.Source) {
		return fmt.Errorf("file %s: Source %q is not an absolute path", f.Path, f.Source)
	}
	st, err := os.Stat(f.Source)
	if err != nil {
		return fmt.Errorf("file %s: %w", f.Path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("file %s: Source %s is not a regular file", f.Path, f.Source)
	}
	return nil
}

// open returns the file's content: Source's file, or Content.
func (f File) open() (io.ReadCloser, error) {
	if f.Source == "" {
		return io.NopCloser(bytes.NewReader(f.Content)), nil
	}
	r, err := os.Open(f.Source)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s for %s: %w", f.Source, f.Path, err)
	}
	return r, nil
}

// variantKey hashes everything the variant adds: the packages, each file's path, mode and content (a
// Source file's current content, so a rebuilt binary makes a new image) and the units. It is empty for
// the default image, whose keys must not change.
func variantKey(o Options) (string, error) {
	if o.emptyVariant() {
		return "", nil
	}
	h := sha256.New()
	// A hash.Hash's Write never fails.
	_, _ = fmt.Fprintf(h, "packages\x00%s\x00", strings.Join(o.ExtraPackages, ","))
	for _, f := range o.Files {
		r, err := f.open()
		if err != nil {
			return "", err
		}
		c := sha256.New()
		_, err = io.Copy(c, r)
		if err := errors.Join(err, r.Close()); err != nil {
			return "", fmt.Errorf("failed to hash %s for the image: %w", f.Path, err)
		}
		_, _ = fmt.Fprintf(h, "file\x00%s\x00%04o\x00%x\x00", f.Path, f.Mode, c.Sum(nil))
	}
	_, _ = fmt.Fprintf(h, "units\x00%s\x00", strings.Join(o.EnabledUnits, ","))
	return "variant-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// applyVariant writes the variant's files into the configured tree at root, then enables its units (so a
// unit among the files is found). Everything goes through an os.Root: a path through a symlink that
// points out of the tree (/var/run → /run) fails instead of writing to this machine's own files.
func applyVariant(root string, o Options) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	for _, f := range o.Files {
		if err := writeFile(r, f); err != nil {
			return err
		}
	}
	for _, u := range o.EnabledUnits {
		if err := enableUnit(r, u); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes f into the tree, replacing what is there (a link is replaced, not followed), with
// missing parent directories created 0755.
func writeFile(r *os.Root, f File) (rerr error) {
	rel := f.Path[1:]
	if err := r.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return fmt.Errorf("failed to create the directory of %s in the image: %w", f.Path, err)
	}
	if err := r.Remove(rel); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to replace %s in the image: %w", f.Path, err)
	}
	src, err := f.open()
	if err != nil {
		return err
	}
	defer func() { rerr = errors.Join(rerr, src.Close()) }()
	dst, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.Mode)
	if err != nil {
		return fmt.Errorf("failed to write %s into the image: %w", f.Path, err)
	}
	_, err = io.Copy(dst, src)
	// The mode is set again because OpenFile's is reduced by this process's umask.
	err = errors.Join(err, dst.Chmod(f.Mode), dst.Close())
	if err != nil {
		return fmt.Errorf("failed to write %s into the image: %w", f.Path, err)
	}
	return nil
}

// enableUnit links unit into multi-user.target.wants as `systemctl enable` does for a unit with
// WantedBy=multi-user.target: to the unit file's absolute path in the image, the administrator's copy in
// /etc/systemd/system before the packaged one in /lib/systemd/system.
func enableUnit(r *os.Root, unit string) error {
	target := ""
	for _, dir := range []string{"/etc/systemd/system/", "/lib/systemd/system/"} {
		if _, err := r.Lstat(dir[1:] + unit); err == nil {
			target = dir + unit
			break
		}
	}
	if target == "" {
		return fmt.Errorf("failed to enable %s in the image: it is in neither /etc/systemd/system nor /lib/systemd/system", unit)
	}
	link := "etc/systemd/system/multi-user.target.wants/" + unit
	if err := r.MkdirAll(path.Dir(link), 0o755); err != nil {
		return fmt.Errorf("failed to enable %s in the image: %w", unit, err)
	}
	if err := r.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to enable %s in the image: %w", unit, err)
	}
	if err := r.Symlink(target, link); err != nil {
		return fmt.Errorf("failed to enable %s in the image: %w", unit, err)
	}
	return nil
}
