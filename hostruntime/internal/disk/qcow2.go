package disk

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A pure Go reader of the qcow2 format (QEMU's docs/interop/qcow2.txt), enough to convert an image to
// raw: version 2 and 3 headers, L1/L2 tables, unallocated and zero clusters, deflate-compressed clusters.
// Everything a provisioning image does not need, and that would change the meaning of the bytes if
// ignored, is refused: backing files, encryption, external data files, extended L2 entries, zstd.

const (
	qcow2Magic = 0x514649fb // "QFI\xfb"

	qcow2IncompatDirty        = 1 << 0
	qcow2IncompatCorrupt      = 1 << 1
	qcow2IncompatExternalData = 1 << 2
	qcow2IncompatCompression  = 1 << 3
	qcow2IncompatExtendedL2   = 1 << 4

	qcow2OffsetMask   = 0x00fffffffffffe00 // bits 9-55 of L1 and standard L2 entries
	qcow2Compressed   = 1 << 62
	qcow2ZeroFlag     = 1 // bit 0 of a standard L2 entry (version 3)
	qcow2MaxL1Bytes   = 32 << 20
	qcow2MinClusterBt = 9
	qcow2MaxClusterBt = 21
)

// ErrNotQcow2 is returned when the file does not start with the qcow2 magic.
var ErrNotQcow2 = errors.New("not a qcow2 image (no QFI\\xfb magic)")

// Qcow2 reads one qcow2 image from random-access storage.
type Qcow2 struct {
	r           io.ReaderAt
	fileSize    int64
	version     uint32
	clusterBits uint32
	clusterSize int64
	virtualSize int64
	l1          []uint64
	l2Entries   int64
	inflater    io.ReadCloser // reused across compressed clusters: a new one allocates ~40 KiB
	src         bytes.Reader
}

// OpenQcow2 parses and checks the header and reads the L1 table. fileSize bounds every offset.
func OpenQcow2(r io.ReaderAt, fileSize int64) (*Qcow2, error) {
	var h [112]byte
	n, err := r.ReadAt(h[:], 0)
	if n < 72 {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("failed to read the qcow2 header: %w", err)
	}
	be := binary.BigEndian
	if be.Uint32(h[0:]) != qcow2Magic {
		return nil, ErrNotQcow2
	}
	q := &Qcow2{r: r, fileSize: fileSize, version: be.Uint32(h[4:])}
	if q.version != 2 && q.version != 3 {
		return nil, fmt.Errorf("qcow2 version %d is not supported (2 and 3 are)", q.version)
	}
	if be.Uint64(h[8:]) != 0 || be.Uint32(h[16:]) != 0 {
		return nil, errors.New("qcow2 image has a backing file: flatten it first (qemu-img convert -O qcow2 without -B, or -O raw)")
	}
	q.clusterBits = be.Uint32(h[20:])
	if q.clusterBits < qcow2MinClusterBt || q.clusterBits > qcow2MaxClusterBt {
		return nil, fmt.Errorf("qcow2 cluster_bits %d is outside 9..21", q.clusterBits)
	}
	q.clusterSize = 1 << q.clusterBits
	vs := be.Uint64(h[24:])
	if vs > 1<<56 {
		return nil, fmt.Errorf("qcow2 virtual size %d is implausible", vs)
	}
	q.virtualSize = int64(vs)
	if m := be.Uint32(h[32:]); m != 0 {
		return nil, fmt.Errorf("qcow2 image is encrypted (crypt_method %d): provisioning images must not be", m)
	}
	if q.version == 3 {
		if n < 104 {
			return nil, fmt.Errorf("failed to read the qcow2 version 3 header: %w", io.ErrUnexpectedEOF)
		}
		incompat := be.Uint64(h[72:])
		headerLen := be.Uint32(h[100:])
		switch {
		case incompat&qcow2IncompatCorrupt != 0:
			return nil, errors.New("qcow2 image is marked corrupt: repair it with qemu-img check -r all")
		case incompat&qcow2IncompatExternalData != 0:
			return nil, errors.New("qcow2 image keeps its data in an external file: not supported")
		case incompat&qcow2IncompatExtendedL2 != 0:
			return nil, errors.New("qcow2 image uses extended L2 entries (subclusters): not supported, convert it without extended_l2=on")
		case incompat&qcow2IncompatCompression != 0:
			if headerLen <= 104 || n < 105 {
				return nil, errors.New("qcow2 header sets the compression-type feature but has no compression type field")
			}
			if t := h[104]; t != 0 {
				name := fmt.Sprintf("type %d", t)
				if t == 1 {
					name = "zstd"
				}
				return nil, fmt.Errorf("qcow2 image is compressed with %s: only zlib (deflate) is supported, convert it with -o compression_type=zlib", name)
			}
		}
		if unknown := incompat &^ (qcow2IncompatDirty | qcow2IncompatCompression); unknown != 0 {
			return nil, fmt.Errorf("qcow2 image uses unknown incompatible features %#x", unknown)
		}
	}
	// Every L2 table is one cluster of 8-byte entries.
	q.l2Entries = q.clusterSize / 8
	l1Size := int64(be.Uint32(h[36:]))
	perL1 := q.clusterSize * q.l2Entries
	need := (q.virtualSize + perL1 - 1) / perL1
	if l1Size < need {
		return nil, fmt.Errorf("qcow2 L1 table has %d entries, the virtual size needs %d", l1Size, need)
	}
	if l1Size*8 > qcow2MaxL1Bytes {
		return nil, fmt.Errorf("qcow2 L1 table of %d entries exceeds QEMU's limit", l1Size)
	}
	l1Off := int64(be.Uint64(h[40:]) & 0x7fffffffffffffff)
	// Only the entries covering the virtual size matter; a longer table is legal and ignored.
	raw, err := q.readRange(l1Off, need*8, "L1 table")
	if err != nil {
		return nil, err
	}
	q.l1 = make([]uint64, need)
	for i := range q.l1 {
		q.l1[i] = be.Uint64(raw[i*8:])
	}
	return q, nil
}

// VirtualSize is the size of the disk the image describes.
func (q *Qcow2) VirtualSize() int64 { return q.virtualSize }

// ClusterSize is the image's cluster size in bytes.
func (q *Qcow2) ClusterSize() int64 { return q.clusterSize }

func (q *Qcow2) readRange(off, n int64, what string) ([]byte, error) {
	if off < 0 || n < 0 || off > q.fileSize || n > q.fileSize-off {
		return nil, fmt.Errorf("qcow2 %s at offset %d (+%d bytes) lies outside the %d-byte file", what, off, n, q.fileSize)
	}
	buf := make([]byte, n)
	if _, err := q.r.ReadAt(buf, off); err != nil && (!errors.Is(err, io.EOF) || off+n != q.fileSize) {
		return nil, fmt.Errorf("failed to read qcow2 %s at offset %d: %w", what, off, err)
	}
	return buf, nil
}

// Walk calls fn for the whole virtual disk in order: data holds the bytes of [off, off+length), or is nil
// when that range reads as zeros (unallocated or zero clusters; a run of them may span many clusters).
// data is reused after fn returns.
func (q *Qcow2) Walk(fn func(off, length int64, data []byte) error) error {
	be := binary.BigEndian
	cluster := make([]byte, q.clusterSize)
	compressed := make([]byte, 0, 2*q.clusterSize)
	var zeroStart, zeroLen int64
	flushZero := func() error {
		if zeroLen == 0 {
			return nil
		}
		err := fn(zeroStart, zeroLen, nil)
		zeroLen = 0
		return err
	}
	zero := func(off, n int64) error {
		if zeroLen > 0 && zeroStart+zeroLen == off {
			zeroLen += n
			return nil
		}
		if err := flushZero(); err != nil {
			return err
		}
		zeroStart, zeroLen = off, n
		return nil
	}
	perL1 := q.clusterSize * q.l2Entries
	for i, l1e := range q.l1 {
		base := int64(i) * perL1
		span := min(perL1, q.virtualSize-base)
		l2Off := int64(l1e & qcow2OffsetMask)
		if l2Off == 0 {
			if err := zero(base, span); err != nil {
				return err
			}
			continue
		}
		if l2Off%q.clusterSize != 0 {
			return fmt.Errorf("qcow2 L2 table offset %#x is not cluster aligned", l2Off)
		}
		l2, err := q.readRange(l2Off, q.clusterSize, "L2 table")
		if err != nil {
			return err
		}
		for j := int64(0); j*q.clusterSize < span; j++ {
			off := base + j*q.clusterSize
			n := min(q.clusterSize, q.virtualSize-off)
			e := be.Uint64(l2[j*8:])
			if e&qcow2Compressed != 0 {
				if compressed, err = q.readCompressed(e, compressed, cluster); err != nil {
					return fmt.Errorf("cluster at virtual offset %d: %w", off, err)
				}
			} else {
				host := int64(e & qcow2OffsetMask)
				if (q.version == 3 && e&qcow2ZeroFlag != 0) || host == 0 {
					if err := zero(off, n); err != nil {
						return err
					}
					continue
				}
				if host%q.clusterSize != 0 {
					return fmt.Errorf("qcow2 data cluster offset %#x is not cluster aligned", host)
				}
				if host > q.fileSize || n > q.fileSize-host {
					return fmt.Errorf("qcow2 data cluster at offset %d lies outside the %d-byte file", host, q.fileSize)
				}
				if _, err := q.r.ReadAt(cluster[:n], host); err != nil && (!errors.Is(err, io.EOF) || host+n != q.fileSize) {
					return fmt.Errorf("failed to read qcow2 data cluster at offset %d: %w", host, err)
				}
			}
			if err := flushZero(); err != nil {
				return err
			}
			if err := fn(off, n, cluster[:n]); err != nil {
				return err
			}
		}
	}
	return flushZero()
}

// readCompressed inflates one compressed cluster (raw deflate, as QEMU writes it) into cluster.
func (q *Qcow2) readCompressed(e uint64, buf, cluster []byte) ([]byte, error) {
	x := 62 - (q.clusterBits - 8)
	host := int64(e & (1<<x - 1))                //nolint:gosec // masked
	sectors := int64((e >> x) & (1<<(62-x) - 1)) //nolint:gosec // masked
	size := (sectors+1)*512 - host%512
	size = min(size, q.fileSize-host) // the last compressed cluster may end before its last sector does
	if host >= q.fileSize || size <= 0 || size > 2*q.clusterSize {
		return buf, fmt.Errorf("qcow2 compressed cluster at offset %d (%d bytes) lies outside the %d-byte file", host, size, q.fileSize)
	}
	buf = buf[:size]
	if _, err := q.r.ReadAt(buf, host); err != nil && !errors.Is(err, io.EOF) {
		return buf, fmt.Errorf("failed to read qcow2 compressed cluster at offset %d: %w", host, err)
	}
	q.src.Reset(buf)
	if r, ok := q.inflater.(flate.Resetter); ok {
		if err := r.Reset(&q.src, nil); err != nil {
			return buf, err
		}
	} else {
		q.inflater = flate.NewReader(&q.src)
	}
	if _, err := io.ReadFull(q.inflater, cluster); err != nil {
		return buf, fmt.Errorf("failed to inflate qcow2 compressed cluster at offset %d: %w", host, err)
	}
	return buf, nil
}
