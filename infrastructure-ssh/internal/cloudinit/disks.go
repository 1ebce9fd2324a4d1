package cloudinit

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/yonder-dev/yonder/pkg/shellwrite"
)

// Disk is one disk_setup entry: the partition table written to a disk that has none.
type Disk struct {
	Device string
	// TableType is "mbr" or "gpt".
	TableType string
	// Layout are the partitions in order; the last one takes the rest of the disk, as in cloud-init.
	Layout    []Partition
	Overwrite bool
}

// Partition is one partition of a disk_setup layout: a share of the disk and an MBR type code.
type Partition struct {
	Percent int
	Type    string
}

// Filesystem is one fs_setup entry.
type Filesystem struct {
	Device string
	// Partition is "" (none) or a partition number.
	Partition  string
	Filesystem string
	Label      string
	Overwrite  bool
	ReplaceFS  string
	ExtraOpts  []string
}

// Mount is one mounts entry, completed with cloud-init's defaults: the six fields of an fstab line.
type Mount [6]string

// MountComment marks the fstab lines the mounts module writes, as cloud-init marks them: a re-run
// replaces them instead of adding them again.
const MountComment = "comment=cloudconfig"

var (
	// cloud-init's short device names (sdb, xvdc1, sr0): they mean /dev/<name>.
	shortDevice = regexp.MustCompile(`^(x?[shv]d[a-z][0-9]*|sr[0-9]+)$`)
	devicePath  = regexp.MustCompile(`^/dev/[A-Za-z0-9/._:+-]+$`)
	// cloud-init's device names that a cloud's metadata resolves; a claimed host has no such metadata.
	metaDevice  = regexp.MustCompile(`^(ami|root|swap|ephemeral[0-9]*|ebs[0-9]*)$`)
	validFSType = regexp.MustCompile(`^[a-z0-9]+$`)
	// An fstab field: one word, nothing that ends the line or starts a comment.
	fstabField = regexp.MustCompile(`^[^\s#\x00]+$`)
	mbrType    = regexp.MustCompile(`^[0-9a-fA-F]{1,2}$`)
	// The gpt partition types sfdisk names by alias, for the MBR codes CABPK writes and sgdisk's codes.
	gptTypes = map[string]string{"83": "L", "8300": "L", "82": "S", "8200": "S", "fd": "R", "fd00": "R", "8e": "V", "8e00": "V", "ef": "U", "ef00": "U"}
)

// device reads a disk_setup or fs_setup device: a /dev path or a short name. A metadata name is
// returned as unsupported (ok false, err nil).
func device(s string) (dev string, ok bool, err error) {
	switch {
	case metaDevice.MatchString(s):
		return "", false, nil
	case shortDevice.MatchString(s):
		return "/dev/" + s, true, nil
	case devicePath.MatchString(s):
		return s, true, nil
	default:
		return "", false, fmt.Errorf("%q is neither a /dev path nor a device name", s)
	}
}

// parseDiskSetup reads disk_setup: a mapping of device to table_type, layout and overwrite.
func (c *Config) parseDiskSetup(v any) ([]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("failed to parse disk_setup: not a mapping")
	}
	var unsupported []string
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		bad := func(f string, a ...any) error {
			return fmt.Errorf("failed to parse disk_setup[%s]: %s", name, fmt.Sprintf(f, a...))
		}
		dev, ok, err := device(name)
		if err != nil {
			return nil, bad("%v", err)
		}
		if !ok {
			unsupported = append(unsupported, "disk_setup["+name+"] (a claimed host has no cloud metadata to name its disks: use a /dev path)")
			continue
		}
		e, isMap := m[name].(map[string]any)
		if !isMap {
			return nil, bad("not a mapping")
		}
		d := Disk{Device: dev, TableType: "mbr"}
		for k, val := range e {
			switch k {
			case "table_type":
				if d.TableType, _ = val.(string); d.TableType != "mbr" && d.TableType != "gpt" {
					return nil, bad("table_type %v is neither mbr nor gpt", val)
				}
			case "overwrite":
				if d.Overwrite, ok = val.(bool); !ok {
					return nil, bad("overwrite %v is not true or false", val)
				}
			case "layout":
				if d.Layout, err = layout(val); err != nil {
					return nil, bad("layout: %v", err)
				}
			default:
				unsupported = append(unsupported, "disk_setup["+name+"]."+k)
			}
		}
		for _, p := range d.Layout {
			if _, ok := gptTypes[strings.ToLower(p.Type)]; d.TableType == "gpt" && !ok {
				return nil, bad("partition type %q has no gpt equivalent (83, 82, fd, 8e, ef or their 4-digit codes)", p.Type)
			}
			if d.TableType == "mbr" && !mbrType.MatchString(p.Type) {
				return nil, bad("partition type %q is not an MBR type code", p.Type)
			}
		}
		if len(d.Layout) > 0 {
			c.Disks = append(c.Disks, d)
		}
	}
	return unsupported, nil
}

// layout reads a disk_setup layout: true (one Linux partition), false (leave the disk), or a list of
// percentages, each alone or with its type ([33, 82]).
func layout(v any) ([]Partition, error) {
	switch l := v.(type) {
	case bool:
		if !l {
			return nil, nil
		}
		return []Partition{{Percent: 100, Type: "83"}}, nil
	case []any:
		var out []Partition
		total := 0
		for _, e := range l {
			p := Partition{Type: "83"}
			pct := e
			if pair, ok := e.([]any); ok {
				if len(pair) != 2 {
					return nil, fmt.Errorf("%v is not [percent, type]", e)
				}
				pct = pair[0]
				t, err := scalar(pair[1])
				if err != nil || (!mbrType.MatchString(t) && gptTypes[strings.ToLower(t)] == "") {
					return nil, fmt.Errorf("%v is not a partition type code", pair[1])
				}
				p.Type = t
			}
			n, err := strconv.Atoi(fmt.Sprint(pct))
			if err != nil || n <= 0 || n > 100 {
				return nil, fmt.Errorf("%v is not a percentage", pct)
			}
			p.Percent, total = n, total+n
			out = append(out, p)
		}
		if total > 100 {
			return nil, fmt.Errorf("the partitions take %d%% of the disk", total)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%v is neither true, false nor a list", v)
	}
}

// parseFSSetup reads fs_setup: a list of filesystems to create.
func (c *Config) parseFSSetup(v any) ([]string, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("failed to parse fs_setup: not a list")
	}
	var unsupported []string
	for i, it := range items {
		bad := func(f string, a ...any) error {
			return fmt.Errorf("failed to parse fs_setup[%d]: %s", i, fmt.Sprintf(f, a...))
		}
		e, isMap := it.(map[string]any)
		if !isMap {
			return nil, bad("not a mapping")
		}
		fs := Filesystem{}
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		skip := false
		for _, k := range keys {
			s, serr := scalar(e[k])
			switch k {
			case "device":
				if serr != nil {
					return nil, bad("device: %v", serr)
				}
				dev, ok, err := device(s)
				if err != nil {
					return nil, bad("device: %v", err)
				}
				if !ok {
					unsupported = append(unsupported, fmt.Sprintf("fs_setup[%d].device: %s (a claimed host has no cloud metadata to name its disks: use a /dev path)", i, s))
					skip = true
				}
				fs.Device = dev
			case "partition":
				switch s {
				case "none":
				case "auto", "any":
					// cloud-init then searches the disk's partitions for a fitting one; name it instead.
					unsupported = append(unsupported, fmt.Sprintf("fs_setup[%d].partition: %s (name the partition number or none)", i, s))
					skip = true
				default:
					if n, err := strconv.Atoi(s); err != nil || n < 1 || n > 128 {
						return nil, bad("partition %q is neither none nor a partition number", s)
					}
					fs.Partition = s
				}
			case "filesystem", "replace_fs":
				if serr != nil || !validFSType.MatchString(s) {
					return nil, bad("%s %v is not a filesystem type", k, e[k])
				}
				if k == "filesystem" {
					fs.Filesystem = s
				} else {
					fs.ReplaceFS = s
				}
			case "label":
				if serr != nil || !fstabField.MatchString(s) {
					return nil, bad("label %q is not one word", s)
				}
				fs.Label = s
			case "overwrite":
				b, isBool := e[k].(bool)
				if !isBool {
					return nil, bad("overwrite %v is not true or false", e[k])
				}
				fs.Overwrite = b
			case "extra_opts":
				opts, err := lines(e[k])
				if err != nil {
					return nil, bad("extra_opts: %v", err)
				}
				fs.ExtraOpts = opts
			default:
				unsupported = append(unsupported, fmt.Sprintf("fs_setup[%d].%s", i, k))
			}
		}
		if fs.Device == "" && !skip {
			return nil, bad("device missing")
		}
		if fs.Filesystem == "" {
			return nil, bad("filesystem missing")
		}
		if !skip {
			c.Filesystems = append(c.Filesystems, fs)
		}
	}
	return unsupported, nil
}

// parseMounts reads mounts: a list of [fs_spec, mount point, type, options, dump, pass], shorter lists
// completed with cloud-init's defaults. An entry without a mount point writes nothing (cloud-init's way
// to drop a default mount).
func (c *Config) parseMounts(v any) ([]string, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("failed to parse mounts: not a list")
	}
	var unsupported []string
	for i, it := range items {
		fields, isList := it.([]any)
		if !isList || len(fields) == 0 || len(fields) > 6 {
			return nil, fmt.Errorf("failed to parse mounts[%d]: not a list of one to six fields", i)
		}
		// Without cloud-init there is no cloud-init.service to require (cloud-init's default on
		// systemd): a mount requiring a unit that does not exist would fail at every boot.
		m := Mount{"", "", "auto", "defaults,nofail", "0", "2"}
		for j, f := range fields {
			if f == nil {
				continue
			}
			s, err := scalar(f)
			if err != nil || !fstabField.MatchString(s) {
				return nil, fmt.Errorf("failed to parse mounts[%d][%d]: %q is not one fstab word", i, j, fmt.Sprint(f))
			}
			m[j] = s
		}
		if m[0] == "" {
			return nil, fmt.Errorf("failed to parse mounts[%d]: no device", i)
		}
		if m[1] == "" {
			continue
		}
		if metaDevice.MatchString(m[0]) {
			unsupported = append(unsupported, fmt.Sprintf("mounts[%d]: %s (a claimed host has no cloud metadata to name its disks: use a /dev path, LABEL= or UUID=)", i, m[0]))
			continue
		}
		if shortDevice.MatchString(m[0]) {
			m[0] = "/dev/" + m[0]
		}
		if m[1] != "none" && !strings.HasPrefix(m[1], "/") {
			return nil, fmt.Errorf("failed to parse mounts[%d]: mount point %q is not absolute", i, m[1])
		}
		m[3] += "," + MountComment
		c.Mounts = append(c.Mounts, m)
	}
	return unsupported, nil
}

// diskScript partitions the disks that have no signature at all (no partition table, filesystem, RAID
// or LVM member: wipefs lists none), or any with overwrite. Sizes are shares of the disk in 512-byte
// sectors; the last partition takes the rest.
func diskScript(b *strings.Builder, disks []Disk) {
	for _, d := range disks {
		dev := shellwrite.Quote(d.Device)
		fmt.Fprintf(b, "[ -b %[1]s ] || { echo 'disk_setup: '%[1]s' is not a block device' >&2; exit 1; }\n", dev)
		if !d.Overwrite {
			// An assignment of its own, so that wipefs failing ends the module under set -e instead of
			// reading as "no data".
			fmt.Fprintf(b, "w=$(wipefs --noheadings --output TYPE %[1]s)\nif [ -n \"$w\" ]; then\n  echo 'disk_setup: '%[1]s' already holds data (a partition table or filesystem): not partitioned (overwrite is false)'\nelse\n", dev)
		}
		fmt.Fprintf(b, "s=$(blockdev --getsz %s)\n", dev)
		label := "dos"
		if d.TableType == "gpt" {
			label = "gpt"
		}
		var lines []string
		for i, p := range d.Layout {
			t := p.Type
			if label == "gpt" {
				t = gptTypes[strings.ToLower(t)]
			}
			if i == len(d.Layout)-1 {
				lines = append(lines, ",,"+t)
			} else {
				lines = append(lines, fmt.Sprintf(",$((s * %d / 100)),%s", p.Percent, t))
			}
		}
		fmt.Fprintf(b, "printf '%%s\\n' %s | sfdisk --quiet --wipe always --label %s %s\n", "\""+strings.Join(lines, "\" \"")+"\"", label, dev)
		// The kernel reads the new table now; partition nodes appear before fs_setup looks for them.
		fmt.Fprintf(b, "partx --update %s 2>/dev/null || blockdev --rereadpt %s\n", dev, dev)
		b.WriteString("if command -v udevadm >/dev/null 2>&1; then udevadm settle || true; fi\n")
		if !d.Overwrite {
			b.WriteString("fi\n")
		}
	}
}

// fsScript creates each filesystem unless its device already holds data (any signature wipefs sees)
// and overwrite is false; replace_fs names the one filesystem type that is formatted over anyway.
func fsScript(b *strings.Builder, filesystems []Filesystem) {
	for _, fs := range filesystems {
		q := shellwrite.Quote
		b.WriteString("d=" + q(fs.Device) + "\n")
		if fs.Partition != "" {
			// sdb1, but nvme0n1p1 and loop0p1: a p goes between a name ending in a digit and the number.
			fmt.Fprintf(b, "case \"$d\" in *[0-9]) d=\"${d}p\"%[1]s ;; *) d=\"$d\"%[1]s ;; esac\n", q(fs.Partition))
		}
		b.WriteString("[ -b \"$d\" ] || { echo \"fs_setup: $d is not a block device\" >&2; exit 1; }\n")
		mkfs, force := "mkfs."+fs.Filesystem, ""
		switch fs.Filesystem {
		case "ext2", "ext3", "ext4":
			force = "-F"
		case "xfs", "btrfs":
			force = "-f"
		case "swap":
			mkfs, force = "mkswap", "-f"
		}
		args := []string{mkfs}
		if force != "" {
			args = append(args, force)
		}
		if fs.Label != "" {
			flag := "-L"
			if fs.Filesystem == "vfat" || fs.Filesystem == "fat" {
				flag = "-n"
			}
			args = append(args, flag, q(fs.Label))
		}
		for _, o := range fs.ExtraOpts {
			args = append(args, q(o))
		}
		args = append(args, "\"$d\"")
		fmt.Fprintf(b, "command -v %[1]s >/dev/null 2>&1 || { echo 'fs_setup: '%[1]s' is not installed' >&2; exit 1; }\n", q(mkfs))
		cmd := strings.Join(args, " ")
		if fs.Overwrite {
			b.WriteString(cmd + "\n")
			continue
		}
		b.WriteString("w=$(wipefs --noheadings --output TYPE \"$d\")\nt=$(blkid -o value -s TYPE \"$d\" || true)\n")
		cond := "[ -z \"$w\" ]"
		if fs.ReplaceFS != "" {
			cond += " || [ \"$t\" = " + q(fs.ReplaceFS) + " ]"
		}
		fmt.Fprintf(b, "if %s; then\n%s\nelse\n  echo \"fs_setup: $d already holds data ($t): not formatted (overwrite is false)\"\nfi\n", cond, cmd)
	}
}

// mountsScript replaces the fstab lines an earlier run wrote (marked with MountComment), adds each
// entry whose device the rest of fstab does not already mount (cloud-init keeps a user's own line),
// creates the mount points, and mounts everything (swapon for swap).
func mountsScript(b *strings.Builder, mounts []Mount) {
	q := shellwrite.Quote
	b.WriteString("t=$(mktemp /etc/.yonder-fstab.XXXXXX)\n")
	fmt.Fprintf(b, "if [ -f /etc/fstab ]; then { grep -v %s /etc/fstab || [ $? -eq 1 ]; } > \"$t\"; fi\n", q(MountComment))
	swap := false
	for _, m := range mounts {
		fmt.Fprintf(b, "if ! awk -v d=%s '$1 == d { f = 1 } END { exit !f }' \"$t\"; then\n", q(m[0]))
		fmt.Fprintf(b, "  printf '%%s\\n' %s >> \"$t\"\n", q(strings.Join(m[:], "\t")))
		if strings.HasPrefix(m[1], "/") {
			fmt.Fprintf(b, "  mkdir -p %s\n", q(m[1]))
		}
		b.WriteString("fi\n")
		swap = swap || m[2] == "swap"
	}
	b.WriteString("chmod 0644 \"$t\"\nmv -f \"$t\" /etc/fstab\n")
	b.WriteString("if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi\nmount -a\n")
	if swap {
		b.WriteString("swapon -a\n")
	}
}
