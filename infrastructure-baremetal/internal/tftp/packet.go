package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
)

// Opcodes (RFC 1350, RFC 2347).
const (
	opRRQ   = 1
	opWRQ   = 2
	opDATA  = 3
	opACK   = 4
	opERROR = 5
	opOACK  = 6
)

// Error codes (RFC 1350, RFC 2347).
const (
	errNotDefined = 0
	errNotFound   = 1
	errAccess     = 2
	errIllegalOp  = 4
)

// Option limits: block size (RFC 2348), timeout (RFC 2349) and window size (RFC 7440).
const (
	minBlockSize  = 8
	maxBlockSize  = 65464
	maxWindowSize = 65535
	maxTimeoutSec = 255
)

var errMalformed = errors.New("malformed TFTP request")

// request is a parsed read or write request.
type request struct {
	op       uint16
	filename string
	mode     string
	// options in the order the client sent them, names lower-cased.
	options []option
}

type option struct{ name, value string }

// parseRequest parses an RRQ or WRQ: opcode, filename, mode and option/value pairs, each NUL-terminated.
func parseRequest(b []byte) (request, error) {
	if len(b) < 2 {
		return request{}, errMalformed
	}
	r := request{op: binary.BigEndian.Uint16(b)}
	if r.op != opRRQ && r.op != opWRQ {
		return request{}, errMalformed
	}
	fields := bytes.Split(b[2:], []byte{0})
	// A well-formed request ends with NUL, so the last field is empty.
	if len(fields) < 3 || len(fields[len(fields)-1]) != 0 {
		return request{}, errMalformed
	}
	fields = fields[:len(fields)-1]
	if len(fields)%2 != 0 {
		return request{}, errMalformed
	}
	r.filename, r.mode = string(fields[0]), strings.ToLower(string(fields[1]))
	for i := 2; i < len(fields); i += 2 {
		r.options = append(r.options, option{strings.ToLower(string(fields[i])), string(fields[i+1])})
	}
	return r, nil
}

// negotiated is what the server agreed to for one transfer.
type negotiated struct {
	blockSize  int
	windowSize int
	timeoutSec int
	// oack lists the accepted options in the client's order; empty: no OACK, plain RFC 1350.
	oack []option
}

// negotiate answers the options a server supports, within its limits; unknown and invalid options are left
// out of the OACK, which RFC 2347 allows (the client then uses the default). size < 0 leaves tsize out.
func negotiate(opts []option, size int64, maxBlock, maxWindow int) negotiated {
	n := negotiated{blockSize: 512, windowSize: 1}
	for _, o := range opts {
		v, err := strconv.Atoi(o.value)
		switch o.name {
		case "blksize":
			if err != nil || v < minBlockSize || v > maxBlockSize {
				continue
			}
			n.blockSize = min(v, maxBlock)
			n.oack = append(n.oack, option{o.name, strconv.Itoa(n.blockSize)})
		case "tsize":
			// A read request should carry 0; like tftpd-hpa, any value asks for the size (atftp sends "enable").
			if size < 0 {
				continue
			}
			n.oack = append(n.oack, option{o.name, strconv.FormatInt(size, 10)})
		case "timeout":
			if err != nil || v < 1 || v > maxTimeoutSec {
				continue
			}
			n.timeoutSec = v
			n.oack = append(n.oack, option{o.name, strconv.Itoa(v)})
		case "windowsize":
			if err != nil || v < 1 || v > maxWindowSize {
				continue
			}
			n.windowSize = min(v, maxWindow)
			n.oack = append(n.oack, option{o.name, strconv.Itoa(n.windowSize)})
		}
	}
	return n
}

func oackPacket(opts []option) []byte {
	b := []byte{0, opOACK}
	for _, o := range opts {
		b = append(b, o.name...)
		b = append(b, 0)
		b = append(b, o.value...)
		b = append(b, 0)
	}
	return b
}

func errorPacket(code uint16, msg string) []byte {
	b := binary.BigEndian.AppendUint16([]byte{0, opERROR}, code)
	b = append(b, msg...)
	return append(b, 0)
}
