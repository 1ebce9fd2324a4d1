// Package ociimage builds Yonder's OCI images with go-containerregistry: images from a list of files (and
// further prepared layers, such as a node's root filesystem), stored in an OCI image layout, written as an
// image archive that `ctr images import` reads (yonder-agent's offline bundles), and pushed to a registry.
// Images are reproducible: the same files give the same digest (no timestamps, sorted entries).
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of an image layer.
type File struct {
	// Path inside the image, without a leading slash ("bin/busybox").
	Path string
	// Content of a regular file (or Source).
	Content []byte
	// Source is a host file whose content the entry gets (for large binaries; Content is then unused).
	Source string
	// Mode bits (default 0644 for files, 0755 for directories).
	Mode int64
	// Symlink target; when set the entry is a symlink.
	Symlink string
	// Dir makes the entry a directory.
	Dir bool
}

// Image describes an image to build.
type Image struct {
	// Base layers, bottom first (e.g. a root filesystem); Files form one more layer on top.
	Base []v1.Layer
	// Files of the top layer (none: no top layer).
	Files []File
	// Entrypoint, Cmd and Env of the image config (Env default: a standard PATH).
	Entrypoint, Cmd, Env []string
	// Labels of the image config.
	Labels map[string]string
	// User the image's process runs as (empty: root). A numeric user lets a Pod with runAsNonRoot and no
	// runAsUser of its own start it: the kubelet refuses a user name it cannot check.
	User string
	// Architecture of the image (default: the architecture this program was built for, i.e. the build's
	// GOARCH, which is the architecture of the binaries the same build produced).
	Architecture string
}

// DefaultEnv is the image environment when Image.Env is nil.
var DefaultEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// Build assembles the image (OCI media types).
func Build(img Image) (v1.Image, error) {
	layers := append([]v1.Layer(nil), img.Base...)
	if len(img.Files) > 0 {
		l, err := Layer(img.Files)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	out, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return nil, fmt.Errorf("failed to assemble the image layers: %w", err)
	}
	cf, err := out.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", img.Architecture
	if cf.Architecture == "" {
		cf.Architecture = runtime.GOARCH
	}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Labels, cf.Config.User = img.Entrypoint, img.Cmd, img.Labels, img.User
	cf.Config.Env = img.Env
	if cf.Config.Env == nil {
		cf.Config.Env = DefaultEnv
	}
	if out, err = mutate.ConfigFile(out, cf); err != nil {
		return nil, fmt.Errorf("failed to set the image config: %w", err)
	}
	return out, nil
}

// Layer builds a gzip-compressed tar layer from files (sorted by path, zero timestamps, root-owned). The
// layer is held in memory.
func Layer(files []File) (v1.Layer, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	if err := writeLayerTar(&buf, sorted); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("failed to build a layer: %w", err)
	}
	return l, nil
}

func writeLayerTar(w io.Writer, files []File) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		h := &tar.Header{Name: f.Path, Mode: f.Mode, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		var src *os.File
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, f.Path+"/"
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		case f.Symlink != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Symlink, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Content))
			if f.Source != "" {
				var err error
				if src, err = os.Open(f.Source); err != nil {
					return fmt.Errorf("failed to read %s for %s: %w", f.Source, f.Path, err)
				}
				st, err := src.Stat()
				if err != nil {
					_ = src.Close()
					return err
				}
				h.Size = st.Size()
			}
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("failed to add %s to the layer: %w", f.Path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		var err error
		if src != nil {
			_, err = io.Copy(tw, src)
			err = errors.Join(err, src.Close())
		} else {
			_, err = tw.Write(f.Content)
		}
		if err != nil {
			return fmt.Errorf("failed to write %s into the layer: %w", f.Path, err)
		}
	}
	return tw.Close()
}

// CompressedLayer is a layer from an already compressed tar file (gzip or zstd, detected), used as it is:
// its digest is the file's sha256. The file must stay in place while the layer is used.
func CompressedLayer(path string) (v1.Layer, error) {
	f, err := os.Open(path) //nolint:gosec // a layer file the caller names
	if err != nil {
		return nil, fmt.Errorf("failed to read layer %s: %w", path, err)
	}
	magic := make([]byte, 4)
	_, rerr := io.ReadFull(f, magic)
	if err := errors.Join(rerr, f.Close()); err != nil {
		return nil, fmt.Errorf("failed to read layer %s: %w", path, err)
	}
	mt := types.OCILayer
	switch {
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		mt = types.OCILayerZStd
	case magic[0] == 0x1f && magic[1] == 0x8b:
	default:
		return nil, fmt.Errorf("failed to use %s as a layer: it is neither gzip- nor zstd-compressed", path)
	}
	opts := []tarball.LayerOption{tarball.WithMediaType(mt)}
	if mt == types.OCILayerZStd {
		opts = append(opts, tarball.WithCompression(compression.ZStd))
	}
	l, err := tarball.LayerFromFile(path, opts...)
	if err != nil {
		return nil, fmt.Errorf("failed to read layer %s: %w", path, err)
	}
	return l, nil
}

// Busybox returns the files of a busybox-static based image: /bin/busybox and applet links.
func Busybox(busybox []byte, applets ...string) []File {
	files := []File{{Path: "bin", Dir: true}, {Path: "tmp", Dir: true, Mode: 0o1777}, {Path: "bin/busybox", Content: busybox, Mode: 0o755}}
	for _, a := range applets {
		files = append(files, File{Path: "bin/" + a, Symlink: "busybox"})
	}
	return files
}

// RefNameAnnotation names an image in an OCI layout's index (the image's full reference).
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// containerdNameAnnotation is the name `ctr images import` gives an image of an OCI layout archive.
const containerdNameAnnotation = "io.containerd.image.name"

// Layout is an OCI image layout directory holding named images.
type Layout struct{ path layout.Path }

// OpenLayout opens (creating it when missing) the OCI image layout at dir.
func OpenLayout(dir string) (*Layout, error) {
	if p, err := layout.FromPath(dir); err == nil {
		return &Layout{path: p}, nil
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("failed to create the OCI layout %s: %w", dir, err)
	}
	return &Layout{path: p}, nil
}

// Add stores img under name (a full reference, repository:tag), replacing an image of that name.
func (l *Layout) Add(name string, img v1.Image) error {
	if err := l.path.RemoveDescriptors(func(d v1.Descriptor) bool { return d.Annotations[RefNameAnnotation] == name }); err != nil {
		return fmt.Errorf("failed to replace %s in %s: %w", name, l.path, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if err := l.path.AppendImage(img, layout.WithAnnotations(map[string]string{RefNameAnnotation: name, containerdNameAnnotation: name}),
		layout.WithPlatform(v1.Platform{OS: cf.OS, Architecture: cf.Architecture})); err != nil {
		return fmt.Errorf("failed to store %s in %s: %w", name, l.path, err)
	}
	return nil
}

// Images returns the layout's images by name.
func (l *Layout) Images() (map[string]v1.Image, error) {
	idx, err := l.path.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("failed to read the OCI layout %s: %w", l.path, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	out := map[string]v1.Image{}
	for _, d := range m.Manifests {
		name := d.Annotations[RefNameAnnotation]
		if name == "" {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("failed to read image %s from %s: %w", name, l.path, err)
		}
		out[name] = img
	}
	return out, nil
}

// WriteArchive writes img as an OCI image layout archive (tar) named name — what `ctr images import` and
// yonder-agent's image/ artifacts read.
func WriteArchive(w io.Writer, name string, img v1.Image) error {
	dir, err := os.MkdirTemp("", "yonder-oci-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	l, err := OpenLayout(dir)
	if err != nil {
		return err
	}
	if err := l.Add(name, img); err != nil {
		return err
	}
	return tarDir(w, dir)
}

// tarDir writes the tree at dir as a tar stream with sorted entries and zero timestamps.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: time.Unix(0, 0)}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		f, err := os.Open(p) //nolint:gosec // inside the temporary layout
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		h.Size = st.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	return errors.Join(err, tw.Close())
}

// Pause is the sandbox ("pause") image of Yonder's node images and tests: busybox's sh waiting until it
// is terminated, which is all a pod sandbox's process does.
func Pause(busybox []byte) Image {
	return Image{Files: Busybox(busybox, "sh", "sleep"),
		Entrypoint: []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"}}
}

// WriteArchiveFile builds spec and writes it to path as an image archive named name.
func WriteArchiveFile(path, name string, spec Image) error {
	img, err := Build(spec)
	if err != nil {
		return err
	}
	f, err := os.Create(path) //nolint:gosec // the caller's output path
	if err != nil {
		return err
	}
	werr := WriteArchive(f, name, img)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("failed to write image archive %s: %w", path, err)
	}
	return nil
}

// ReadArchive opens the named images of an image archive written by WriteArchive (an OCI layout tar),
// unpacked into a temporary directory that done removes (the images read from it until then).
func ReadArchive(path string) (imgs map[string]v1.Image, done func(), err error) {
	dir, err := os.MkdirTemp("", "yonder-oci-")
	if err != nil {
		return nil, nil, err
	}
	done = func() { _ = os.RemoveAll(dir) }
	if err := untar(path, dir); err != nil {
		done()
		return nil, nil, fmt.Errorf("failed to read image archive %s: %w", path, err)
	}
	l, err := OpenLayout(dir)
	if err == nil {
		imgs, err = l.Images()
	}
	if err != nil {
		done()
		return nil, nil, err
	}
	return imgs, done, nil
}

// untar unpacks the regular files and directories of an archive into dir.
func untar(path, dir string) error {
	f, err := os.Open(path) //nolint:gosec // the caller's archive
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o750)
		case tar.TypeReg:
			err = writeFrom(p, tr)
		default:
			err = fmt.Errorf("unexpected entry %s", h.Name)
		}
		if err != nil {
			return err
		}
	}
}

func writeFrom(p string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return err
	}
	out, err := os.Create(p) //nolint:gosec // below the caller's temporary directory
	if err != nil {
		return err
	}
	_, err = io.Copy(out, r)
	return errors.Join(err, out.Close())
}

// Transport is go-containerregistry's default HTTP transport, trusting caPEM (a registry's private CA)
// besides the system roots; no caPEM: the system roots alone.
func Transport(caPEM []byte) (http.RoundTripper, error) {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	if len(caPEM) == 0 {
		return t, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the registry CA is not a PEM certificate")
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}
