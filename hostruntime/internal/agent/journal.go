package agent

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
)

// DefaultJournalSocket is journald's native protocol socket.
const DefaultJournalSocket = "/run/systemd/journal/socket"

// journalWriter sends each log line to journald (native protocol) with SYSLOG_IDENTIFIER=yonder-agent,
// so `journalctl -t yonder-agent` shows the agent's log on hosts that run journald.
type journalWriter struct{ conn *net.UnixConn }

// newJournalWriter returns nil when no journald listens at socket.
func newJournalWriter(socket string) io.WriteCloser {
	if _, err := os.Stat(socket); err != nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return nil
	}
	return &journalWriter{conn: c}
}

func (j *journalWriter) Write(p []byte) (int, error) {
	msg := bytes.TrimRight(p, "\n")
	var b bytes.Buffer
	b.WriteString("SYSLOG_IDENTIFIER=yonder-agent\n")
	if bytes.IndexByte(msg, '\n') < 0 {
		b.WriteString("MESSAGE=")
		b.Write(msg)
		b.WriteByte('\n')
	} else { // multi-line values use the length-prefixed form
		b.WriteString("MESSAGE\n")
		_ = binary.Write(&b, binary.LittleEndian, uint64(len(msg)))
		b.Write(msg)
		b.WriteByte('\n')
	}
	_, _ = j.conn.Write(b.Bytes()) // logging must never fail the agent
	return len(p), nil
}

func (j *journalWriter) Close() error { return j.conn.Close() }
