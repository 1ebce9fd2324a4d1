// Package configdrive writes an OpenStack config drive onto a provisioned disk, where the image's own
// cloud-init (its ConfigDrive datasource) finds the bootstrap data on first boot: a FAT filesystem
// labelled config-2 holding openstack/latest/{meta_data.json,user_data,network_data.json}, in a new
// partition at the end of the free space after the image's last partition (GPT or MBR) or, on a disk
// without a partition table, in the disk's last 64 MiB — the layout Metal3/Ironic leave on a whole-disk
// image, which keeps the space behind the image's root partition for cloud-init's growpart.
package configdrive

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DriveSize is the size of a new config drive partition: Ironic's maximum, far more than the few KiB of
// JSON and cloud-config it holds, so a large user_data (a script with embedded files) still fits.
const DriveSize = 64 << 20

// label is the filesystem label cloud-init's ConfigDrive datasource looks for.
const label = "config-2"

// Drive is what goes on the config drive.
type Drive struct {
	// UserData is openstack/latest/user_data; nil writes no user_data file.
	UserData []byte
	// MetaData is openstack/latest/meta_data.json, a JSON object (uuid, hostname, name, public_keys…).
	// It must hold a non-empty "uuid": cloud-init takes it as the instance-id and rejects a config drive
	// without one ("No 'uuid' entry in metadata"), so nil or "{}" is refused rather than written.
	MetaData []byte
	// NetworkData is openstack/latest/network_data.json; nil writes no file.
	NetworkData []byte
}

// Result says where the config drive went.
type Result struct {
	Device string `json:"device"`
	// Partition is the partition number (as in /dev/vda<N>); 0 when the disk has no partition table.
	Partition int `json:"partition"`
	// Table is the disk's partition table: gpt, mbr or none.
	Table string `json:"table"`
	// Offset and Size locate the config drive's filesystem on the disk, in bytes.
	Offset int64 `json:"offset"`
	Size   int64 `json:"size"`
	// Reused is true when an existing config-2 filesystem was rewritten instead of a partition added.
	Reused bool `json:"reused"`
	// Filesystem is the filesystem written: vfat.
	Filesystem string `json:"filesystem"`
}

// Write puts d on device (a whole disk such as /dev/vda, or a disk image file) as a new 64 MiB partition
// at the end of the free space after the last partition (GPT or MBR), or, on a disk with no partition
// table, in its last 64 MiB. An existing partition whose filesystem is labelled config-2 is rewritten instead, so Write is
// idempotent. Everything is checked and the new tables computed before the first write; the filesystem is
// written first and the partition table last, so an interrupted Write leaves the image's table as it was.
func Write(device string, d Drive) (*Result, error) {
	files, err := d.tree()
	if err != nil {
		return nil, err
	}
	f, size, sector, err := openDevice(device)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var guid [16]byte
	if _, err := rand.Read(guid[:]); err != nil {
		return nil, fmt.Errorf("failed to make a partition GUID: %w", err)
	}
	guid[7] = guid[7]&0x0f | 0x40 // RFC 4122 version 4, in GPT's mixed-endian byte order
	guid[8] = guid[8]&0x3f | 0x80
	p, err := makePlan(diskView{r: f, size: size, sector: sector}, DriveSize, guid)
	if err != nil {
		return nil, fmt.Errorf("failed to place a config drive on %s: %w", device, err)
	}
	fsSize := min(p.size, DriveSize)
	img, err := buildFAT(fsSize, sector, p.offset/sector, files, time.Now().UTC(), binary.LittleEndian.Uint32(guid[:4]))
	if err != nil {
		return nil, fmt.Errorf("failed to build the config drive for %s: %w", device, err)
	}
	if err := writeAll(f, device, p, img); err != nil {
		return nil, err
	}
	return &Result{Device: device, Partition: p.partition, Table: p.table, Offset: p.offset, Size: p.size,
		Reused: p.reused, Filesystem: "vfat"}, nil
}

// writeAll writes the filesystem, makes it durable, then the partition table, and asks the kernel to
// re-read the table (a regular file or a loop device without partition scanning just says no).
func writeAll(f *os.File, device string, p *plan, img []byte) error {
	if _, err := f.WriteAt(img, p.offset); err != nil {
		return fmt.Errorf("failed to write the config drive filesystem to %s at byte %d: %w", device, p.offset, err)
	}
	// A reused partition larger than the filesystem: its last MiB may hold another format's signature
	// (mdraid, ZFS) that would make blkid's answer ambiguous and hide the label from cloud-init.
	if rest := p.size - int64(len(img)); rest > 0 {
		n := min(rest, 1<<20)
		if _, err := f.WriteAt(make([]byte, n), p.offset+p.size-n); err != nil {
			return fmt.Errorf("failed to clear the end of the config drive partition on %s: %w", device, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("failed to sync %s: %w", device, err)
	}
	for _, w := range p.tableWrites {
		if _, err := f.WriteAt(w.data, w.off); err != nil {
			return fmt.Errorf("failed to write the partition table of %s at byte %d: %w", device, w.off, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("failed to sync %s: %w", device, err)
	}
	// Drop the kernel's cached blocks so the next reader (the partition scan, the next boot) sees the disk.
	if err := ioctlNoArg(f, unix.BLKFLSBUF); err != nil && !errors.Is(err, unix.ENOTTY) {
		return fmt.Errorf("failed to flush the buffers of %s: %w", device, err)
	}
	_ = ioctlNoArg(f, unix.BLKRRPART) // EBUSY/EINVAL: the bytes are on disk, the next boot reads them
	return nil
}

// openDevice opens a block device exclusively (O_EXCL fails while one of its partitions is mounted) or a
// regular file, and returns its size and logical sector size.
func openDevice(path string) (*os.File, int64, int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("failed to open the disk for the config drive: %w", err)
	}
	isBlock := st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0
	if !isBlock && !st.Mode().IsRegular() {
		return nil, 0, 0, fmt.Errorf("%s is neither a block device nor a regular file (mode %s)", path, st.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_EXCL, 0) //nolint:gosec // the disk the agent provisions
	if err != nil {
		return nil, 0, 0, fmt.Errorf("failed to open %s exclusively (mounted or in use?): %w", path, err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		_ = f.Close()
		return nil, 0, 0, fmt.Errorf("failed to read the size of %s: %w", path, err)
	}
	sector := int64(512)
	if isBlock {
		if ss, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET); err == nil && ss >= 512 {
			sector = int64(ss)
		}
	}
	return f, size, sector, nil
}

func ioctlNoArg(f *os.File, req uint) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), 0); errno != 0 {
		return errno
	}
	return nil
}

// tree checks d and lays it out as cloud-init's ConfigDrive reader expects it.
func (d Drive) tree() (*fatNode, error) {
	meta := d.MetaData
	if meta == nil {
		return nil, errors.New(`config drive meta_data.json is missing: cloud-init needs at least {"uuid": "<instance id>"}`)
	}
	var obj map[string]any
	if err := json.Unmarshal(meta, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("config drive meta_data.json must be a JSON object: %v", orNotObject(err))
	}
	if id, _ := obj["uuid"].(string); id == "" {
		return nil, errors.New(`config drive meta_data.json has no "uuid" string: cloud-init's ConfigDrive datasource requires it (its instance-id)`)
	}
	latest := &fatNode{name: "latest", dir: true, children: []*fatNode{{name: "meta_data.json", data: meta}}}
	if d.NetworkData != nil {
		var nd map[string]any
		if err := json.Unmarshal(d.NetworkData, &nd); err != nil || nd == nil {
			return nil, fmt.Errorf("config drive network_data.json must be a JSON object: %v", orNotObject(err))
		}
		latest.children = append(latest.children, &fatNode{name: "network_data.json", data: d.NetworkData})
	}
	if d.UserData != nil {
		latest.children = append(latest.children, &fatNode{name: "user_data", data: d.UserData})
	}
	if total := len(d.UserData) + len(meta) + len(d.NetworkData); total > DriveSize-(1<<20) {
		return nil, fmt.Errorf("the config drive's files total %d bytes, more than its %d MiB filesystem holds", total, DriveSize>>20)
	}
	openstack := &fatNode{name: "openstack", dir: true, children: []*fatNode{latest}}
	return &fatNode{dir: true, children: []*fatNode{openstack}}, nil
}

func orNotObject(err error) error {
	if err != nil {
		return err
	}
	return errors.New("got null")
}

// MetaData builds a meta_data.json with the fields cloud-init reads: uuid (its instance-id, required),
// hostname and name, and public_keys (name → OpenSSH public key).
func MetaData(uuid, hostname string, keys map[string]string) []byte {
	md := struct {
		UUID       string            `json:"uuid"`
		Hostname   string            `json:"hostname,omitempty"`
		Name       string            `json:"name,omitempty"`
		PublicKeys map[string]string `json:"public_keys,omitempty"`
	}{uuid, hostname, hostname, keys}
	b, _ := json.Marshal(md) //nolint:errchkjson // strings and a map of strings always marshal
	return b
}
