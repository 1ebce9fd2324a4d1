// Package proc runs the long-lived processes of the test tiers (etcd, kube-apiserver, sshd…) with their
// output captured to a log file, so that a failure can say what the process printed, and stops them
// gracefully: SIGTERM first, SIGKILL only when a process ignores it.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/yonder-dev/yonder/pkg/deathsig"
)

// Process is one started child process.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// Start launches name with args, appending its stdout and stderr to <logDir>/<name>.log. The process is
// placed in its own process group so that Stop also ends the children it forks.
func Start(name, logDir string, env []string, path string, args ...string) (*Process, error) {
	if err := os.MkdirAll(logDir, 0o750); err != nil {
		return nil, fmt.Errorf("failed to create log directory %s: %w", logDir, err)
	}
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // the harness names its own log files
	if err != nil {
		return nil, fmt.Errorf("failed to open log file for %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	// Killed with the test process (a test binary killed by its timeout leaves nothing running), and only then.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	child, err := deathsig.Start(cmd)
	if err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("failed to start %s (%s): %w", name, path, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = child.Err()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs it.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	return nil
}

// Tail returns the last n lines the process wrote, for error messages.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitFor polls ready until it returns nil, the process exits, or the timeout passes. The returned error
// carries the tail of the process log so the reader sees why it did not come up.
func (p *Process) WaitFor(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it became ready (%v); last log lines from %s:\n%s", p.Name, p.waitErr, p.LogPath, p.Tail(20))
		case <-ctx.Done():
			return fmt.Errorf("%s did not become ready within %s (last check: %v); last log lines from %s:\n%s", p.Name, timeout, last, p.LogPath, p.Tail(20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePort asks the kernel for a free TCP port on host, never one it returned in this process during the
// last handedOutFor: the kernel may hand out a port it has just freed again, and two ports asked for one
// after the other (etcd's client and peer ports) once came back equal, so etcd failed to bind its second
// listener. Another process may still take the port before the caller binds it; callers that bind late
// report "address already in use" from the child's log.
func FreePort(host string) (int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range 64 {
		// Every port tried stays bound until the end, so the kernel offers another one each time.
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("failed to find a free port on %s: %w", host, err)
		}
		held = append(held, l)
		if port := l.Addr().(*net.TCPAddr).Port; handedOut.claim(port) { //nolint:forcetypeassert // a TCP listener's address
			return port, nil
		}
	}
	return 0, fmt.Errorf("failed to find a free port on %s that was not handed out a moment ago", host)
}

// handedOutFor is how long FreePort does not return a port again: long enough for the caller to bind it.
const handedOutFor = time.Minute

// handedOut is the ports FreePort returned, and when.
var handedOut = portLedger{at: map[int]time.Time{}}

type portLedger struct {
	mu sync.Mutex
	at map[int]time.Time
}

// claim records port as handed out now, unless it was handed out during the last handedOutFor.
func (p *portLedger) claim(port int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for k, t := range p.at {
		if now.Sub(t) >= handedOutFor {
			delete(p.at, k)
		}
	}
	if _, ok := p.at[port]; ok {
		return false
	}
	p.at[port] = now
	return true
}

// CheckPortFree returns a clear error when host:port is already bound.
func CheckPortFree(host string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("port %d on %s is already in use: stop the process that holds it (`ss -ltnp 'sport = :%d'`) or pick another port", port, host, port)
		}
		return fmt.Errorf("cannot bind %s:%d: %w", host, port, err)
	}
	return l.Close()
}

// Run executes a short command and returns its combined output in the error when it fails.
func Run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s failed: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// LookPath is exec.LookPath that also searches the sbin directories, which a non-login root shell may lack.
func LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or sbin directories", name)
}

// HTTPOK GETs url with c and returns nil when it answers 200 OK: the readiness check of a process's health
// endpoint, for WaitFor.
func HTTPOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s returned %s", url, resp.Status)
	}
	return nil
}
