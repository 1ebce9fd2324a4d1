package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"github.com/spf13/cobra"

	"github.com/yonder-dev/yonder/hostruntime/internal/disk"
)

// newDiskCommand is the bare-metal image step: the provisioning ramdisk's init runs `disk write` with the
// image and hints from the attested envelope and `disk clean --all` when deprovisioning with
// automatedCleaningMode metadata; an operator runs `disk list` to see what the hints will pick.
func newDiskCommand() *cobra.Command {
	var opts disk.ListOptions
	cmd := &cobra.Command{
		Use:   "disk",
		Short: "(bare metal) list disks, write an image to the root disk, clean disk metadata",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&opts.SysRoot, "sys-root", disk.DefaultSysRoot, "where sysfs is mounted")
	pf.StringVar(&opts.DevRoot, "dev-root", disk.DefaultDevRoot, "where the device nodes and /dev/disk/by-* links are")
	pf.BoolVar(&opts.IncludeLoop, "include-loop", false, "treat attached loop devices as disks (rehearsals and tests; never in the ramdisk)")
	cmd.AddCommand(newDiskListCommand(&opts), newDiskWriteCommand(&opts), newDiskCleanCommand(&opts))
	return cmd
}

func newDiskListCommand(opts *disk.ListOptions) *cobra.Command {
	var hintsJSON string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Print the disks, the excluded block devices and the root disk the hints choose, as JSON",
		RunE: func(cmd *cobra.Command, _ []string) error {
			hints, err := parseHints(hintsJSON)
			if err != nil {
				return err
			}
			inv, err := disk.List(*opts)
			if err != nil {
				return err
			}
			out := struct {
				*disk.Inventory
				Root      *disk.Device `json:"root,omitempty"`
				RootError string       `json:"rootError,omitempty"`
			}{Inventory: inv}
			if d, err := inv.Choose(hints); err != nil {
				out.RootError = err.Error()
			} else {
				out.Root = &d
			}
			return printJSON(cmd, out)
		},
	}
	cmd.Flags().StringVar(&hintsJSON, "hints-json", "", "Metal3 rootDeviceHints as JSON, e.g. '{\"model\":\"SAMSUNG\",\"minSizeGigabytes\":100}'")
	return cmd
}

func newDiskWriteCommand(opts *disk.ListOptions) *cobra.Command {
	var hintsJSON, imageJSON, device, format, spoolDir string
	var img metal3v1.Image
	var checksumType string
	cmd := &cobra.Command{
		Use:   "write",
		Short: "Write an image (raw or qcow2, checksum verified while downloaded) to the root disk the hints choose",
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if imageJSON != "" {
				if f.Changed("url") || f.Changed("checksum") || f.Changed("checksum-type") || f.Changed("format") {
					return errors.New("--image-json and --url/--checksum/--checksum-type/--format are alternatives: give one")
				}
				if err := strictJSON(imageJSON, &img); err != nil {
					return fmt.Errorf("--image-json: %w", err)
				}
			} else {
				img.ChecksumType = metal3v1.ChecksumType(checksumType)
				if format != "" {
					img.DiskFormat = &format
				}
			}
			if img.URL == "" {
				return errors.New("no image: pass --url and --checksum, or --image-json")
			}
			if device != "" && hintsJSON != "" {
				return errors.New("--device and --hints-json are alternatives: give one")
			}
			if device == "" {
				hints, err := parseHints(hintsJSON)
				if err != nil {
					return err
				}
				inv, err := disk.List(*opts)
				if err != nil {
					return err
				}
				d, err := inv.Choose(hints)
				if err != nil {
					return err
				}
				device = d.Path
			}
			w := &disk.Writer{SpoolDir: spoolDir}
			res, err := w.Write(cmd.Context(), device, img)
			if err != nil {
				return err
			}
			return printJSON(cmd, res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&img.URL, "url", "", "image URL (http or https)")
	f.StringVar(&img.Checksum, "checksum", "", "hex digest of the image file, or the http(s) URL of a checksum file")
	f.StringVar(&checksumType, "checksum-type", "auto", "md5, sha256, sha512 or auto (by the digest's length)")
	f.StringVar(&format, "format", "raw", "raw (streamed to the disk) or qcow2 (held in --spool-dir, then converted)")
	f.StringVar(&imageJSON, "image-json", "", "the Metal3 image as JSON ({\"url\":…,\"checksum\":…,\"checksumType\":…,\"format\":…}) instead of the flags above")
	f.StringVar(&hintsJSON, "hints-json", "", "Metal3 rootDeviceHints as JSON (default: the smallest disk of at least 4 GiB)")
	f.StringVar(&device, "device", "", "write to this device instead of the one the hints choose")
	f.StringVar(&spoolDir, "spool-dir", "", "where a qcow2 image is held while converted (default $TMPDIR or /tmp, the ramdisk's memory)")
	return cmd
}

func newDiskCleanCommand(opts *disk.ListOptions) *cobra.Command {
	var all bool
	var devices []string
	cmd := &cobra.Command{
		Use:   "clean",
		Short: "Remove partition tables and filesystem/RAID/LVM signatures (automatedCleaningMode metadata)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all == (len(devices) > 0) {
				return errors.New("give either --all or --device (repeatable)")
			}
			if all {
				inv, err := disk.List(*opts)
				if err != nil {
					return err
				}
				if len(inv.Devices) == 0 {
					return fmt.Errorf("no disk to clean (excluded: %s)", describeExcluded(inv.Excluded))
				}
				for _, d := range inv.Devices {
					devices = append(devices, d.Path)
				}
			}
			var reports []*disk.CleanReport
			var errs []error
			// Every disk is attempted: one disk in use must not leave the others' metadata in place.
			for _, d := range devices {
				rep, err := disk.Clean(d)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				reports = append(reports, rep)
			}
			if err := printJSON(cmd, reports); err != nil {
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "clean every disk `disk list` shows")
	cmd.Flags().StringArrayVar(&devices, "device", nil, "clean this device (repeatable)")
	return cmd
}

func describeExcluded(ex []disk.Excluded) string {
	if len(ex) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(ex))
	for _, e := range ex {
		parts = append(parts, e.Name+": "+e.Reason)
	}
	return strings.Join(parts, "; ")
}

func parseHints(s string) (*metal3v1.RootDeviceHints, error) {
	if s == "" {
		return nil, nil
	}
	h := &metal3v1.RootDeviceHints{}
	if err := strictJSON(s, h); err != nil {
		return nil, fmt.Errorf("--hints-json: %w", err)
	}
	if h.MinSizeGigabytes < 0 {
		return nil, errors.New("--hints-json: minSizeGigabytes must not be negative")
	}
	return h, nil
}

// strictJSON refuses unknown fields: a misspelt hint ("serial" for "serialNumber") must not silently
// widen the choice to any disk.
func strictJSON(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
