// Package ociarchive writes OCI image layout archives (what `ctr images import` and `docker load` read)
// from a list of files, without a registry or a container tool. yonder-agent's air-gapped bundles carry
// images in this form; tests build their pause and workload images with it.
package ociarchive

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// File is one entry of the image's single layer.
type File struct {
	// Path inside the image, without a leading slash ("bin/busybox").
	Path string
	// Content of a regular file.
	Content []byte
	// Mode bits (default 0644; 0755 for executables).
	Mode int64
	// Symlink target; when set the entry is a symlink.
	Symlink string
	// Dir makes the entry a directory.
	Dir bool
}

// Image is a one-layer image.
type Image struct {
	// Name is the full reference it is imported as, e.g. registry.k8s.io/pause:3.10.
	Name string
	// Files of its layer.
	Files []File
	// Entrypoint and Cmd of the image config.
	Entrypoint, Cmd []string
	// Env of the image config.
	Env []string
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

// Write writes the archive of img (linux/amd64) to w. The output is deterministic.
func Write(w io.Writer, img Image) error {
	layer, err := layerTar(img.Files)
	if err != nil {
		return err
	}
	layerDigest := digest(layer)
	env := img.Env
	if env == nil {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": img.Entrypoint, "Cmd": img.Cmd, "Env": env},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(config), Size: int64(len(config))},
		"layers":        []descriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: layerDigest, Size: int64(len(layer))}},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: digest(manifest), Size: int64(len(manifest)),
			Annotations: map[string]string{"io.containerd.image.name": img.Name, "org.opencontainers.image.ref.name": img.Name},
			Platform:    map[string]string{"architecture": "amd64", "os": "linux"},
		}},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(manifest), manifest},
		{blob(config), config},
		{blob(layer), layer},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func layerTar(files []File) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range sorted {
		h := &tar.Header{Name: f.Path, Mode: f.Mode, ModTime: time.Unix(0, 0)}
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
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("failed to add %s to the layer: %w", f.Path, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Content); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Busybox returns the files of a busybox-static based image: /bin/busybox and applet links.
func Busybox(busybox []byte, applets ...string) []File {
	files := []File{{Path: "bin", Dir: true}, {Path: "tmp", Dir: true, Mode: 0o1777}, {Path: "bin/busybox", Content: busybox, Mode: 0o755}}
	for _, a := range applets {
		files = append(files, File{Path: "bin/" + a, Symlink: "busybox"})
	}
	return files
}

func digest(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }

func blob(b []byte) string { s := sha256.Sum256(b); return "blobs/sha256/" + hex.EncodeToString(s[:]) }
