// Package remote holds the commands the provider runs on a host and parses their answers: start a
// bootstrap run detached from the SSH session, read its state, clean the host, gather facts. A run is
// recorded on the host in RunsDir/<runID>; `mkdir` of that directory is the lock that makes starting a
// run idempotent, so a restarted controller resumes a run instead of starting it twice.
package remote

import (
	"context"
	"fmt"
	"math"
	"path"
	"regexp"
	"strconv"
	"strings"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
)

// RunsDir is where runs are recorded on a host.
const RunsDir = "/var/lib/yonder-ssh/runs"

// MaxLogBytes bounds a run's log on the host: the first 8 MiB of output are kept, the rest is read and
// dropped (never blocking or killing the bootstrap).
const MaxLogBytes = 8 << 20

// SentinelPath is the file every Cluster API bootstrap writes when it succeeded.
const SentinelPath = "/run/cluster-api/bootstrap-success.complete"

var validRunID = regexp.MustCompile(`^[a-zA-Z0-9-]{1,64}$`)

func runDir(runID string) (string, error) {
	if !validRunID.MatchString(runID) {
		return "", fmt.Errorf("invalid run id %q", runID)
	}
	return RunsDir + "/" + runID, nil
}

// RunState is what the host says about a run.
type RunState struct {
	// Started is true once the run directory exists.
	Started bool
	// Finished is true once the script exited.
	Finished bool
	// ExitCode of the script when Finished.
	ExitCode int
	// Sentinel is true when SentinelPath exists.
	Sentinel bool
}

// Start starts the script as run runID, detached from the SSH session (setsid, output to the run's
// bounded log), unless that run already exists. It returns true when this call started it.
//
// The script is uploaded to a file of this call's own and its length checked before the run directory
// is taken: a session cut mid-upload (a controller killed, a network drop) leaves no run, never a run of
// a truncated script, and the next attempt starts it whole. Past the upload the commands ignore SIGHUP,
// so taking the run and starting it are not cut apart either.
func Start(ctx context.Context, e sshexec.Executor, runID, script string) (bool, error) {
	d, err := runDir(runID)
	if err != nil {
		return false, err
	}
	cmd := fmt.Sprintf(`umask 077
mkdir -p %[1]s
tmp=$(mktemp %[1]s/.%[4]s.XXXXXX) || exit 1
cat > "$tmp"
if [ $(wc -c < "$tmp") -ne %[5]d ]; then
  rm -f "$tmp"
  echo "incomplete upload of the bootstrap script" >&2
  exit 1
fi
trap '' HUP
if mkdir %[2]s 2>/dev/null; then
  mv "$tmp" %[2]s/bootstrap.sh
  setsid sh -c 'echo $$ > "$0/pid"; { sh "$0/bootstrap.sh" 2>&1; echo $? > "$0/exit.tmp"; } | { head -c %[3]d; cat >/dev/null; } > "$0/log"; mv "$0/exit.tmp" "$0/exit"' %[2]s </dev/null >/dev/null 2>&1 &
  echo started
else
  rm -f "$tmp"
  echo exists
fi`, RunsDir, d, MaxLogBytes, runID, len(script))
	out, _, err := e.Run(ctx, cmd, strings.NewReader(script))
	if err != nil {
		return false, fmt.Errorf("failed to start bootstrap run %s: %w", runID, err)
	}
	return strings.TrimSpace(string(out)) == "started", nil
}

// State reads the state of run runID.
func State(ctx context.Context, e sshexec.Executor, runID string) (RunState, error) {
	d, err := runDir(runID)
	if err != nil {
		return RunState{}, err
	}
	cmd := fmt.Sprintf(`if [ -d %[1]s ]; then echo started; fi
if [ -f %[1]s/exit ]; then echo "exit $(cat %[1]s/exit)"; fi
if [ -e %[2]s ]; then echo sentinel; fi`, d, SentinelPath)
	out, _, err := e.Run(ctx, cmd, nil)
	if err != nil {
		return RunState{}, fmt.Errorf("failed to read bootstrap run %s: %w", runID, err)
	}
	var s RunState
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case l == "started":
			s.Started = true
		case l == "sentinel":
			s.Sentinel = true
		case strings.HasPrefix(l, "exit "):
			s.Finished = true
			s.ExitCode, err = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, "exit ")))
			if err != nil {
				s.ExitCode = -1
			}
		}
	}
	return s, nil
}

// LogTail returns the last n bytes of run runID's output.
func LogTail(ctx context.Context, e sshexec.Executor, runID string, n int) (string, error) {
	d, err := runDir(runID)
	if err != nil {
		return "", err
	}
	out, _, err := e.Run(ctx, fmt.Sprintf("tail -c %d %s/log 2>/dev/null || true", n, d), nil)
	if err != nil {
		return "", fmt.Errorf("failed to read log of bootstrap run %s: %w", runID, err)
	}
	return string(out), nil
}

// Finish removes the bootstrap script (it may hold credentials) of a finished run and keeps its log.
func Finish(ctx context.Context, e sshexec.Executor, runID string) error {
	d, err := runDir(runID)
	if err != nil {
		return err
	}
	if _, _, err := e.Run(ctx, "rm -f "+d+"/bootstrap.sh", nil); err != nil {
		return fmt.Errorf("failed to remove bootstrap script of run %s: %w", runID, err)
	}
	return nil
}

// ProviderIDPath is where the provider tells the host its providerID before the bootstrap runs: the
// bootstrap data is rendered before a host is chosen, so it cannot carry it. yonder-agent reads this file
// (its --provider-id-file default) when its AgentConfig names no providerID; a kubeadm-based bootstrap
// can read it in a runcmd.
const ProviderIDPath = "/etc/yonder/provider-id"

// ProviderIDPrelude is the shell that writes ProviderIDPath; it runs before the bootstrap's own commands.
func ProviderIDPrelude(providerID string) string {
	return fmt.Sprintf("{ mkdir -p %[1]s && printf '%%s\\n' %[2]s > %[3]s; } || { echo 'failed to write %[3]s' >&2; exit 1; }\n",
		path.Dir(ProviderIDPath), sshexec.Quote(providerID), ProviderIDPath)
}

// Cleanup stops run runID if it still runs, resets the host as its spec.cleanup says (`yonder-agent
// reset`, with --keep-cache for keepAgentCache, when the agent is on the PATH; else the commands, each of
// which must succeed), and removes the run, the sentinel and the providerID file.
func Cleanup(ctx context.Context, e sshexec.Executor, runID string, spec infrav1.CleanupSpec) error {
	d, err := runDir(runID)
	if err != nil {
		return err
	}
	reset := "yonder-agent reset"
	if spec.KeepAgentCache {
		reset += " --keep-cache"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "if [ -f %[1]s/pid ] && [ ! -f %[1]s/exit ]; then kill -TERM -- -\"$(cat %[1]s/pid)\" 2>/dev/null || true; fi\n", d)
	fmt.Fprintf(&b, "if command -v yonder-agent >/dev/null 2>&1; then\n  %s || exit $?\nelse\n  :\n", reset)
	for _, c := range spec.Commands {
		fmt.Fprintf(&b, "  sh -c %s || { echo \"cleanup command failed: %s\" >&2; exit 1; }\n", sshexec.Quote(c), strings.ReplaceAll(firstLine(c), `"`, ""))
	}
	b.WriteString("fi\n")
	fmt.Fprintf(&b, "rm -rf %s %s/.%s.*\nrm -f %s %s\n", d, RunsDir, runID, SentinelPath, ProviderIDPath)
	if _, _, err := e.Run(ctx, b.String(), nil); err != nil {
		return fmt.Errorf("failed to clean up host: %w", err)
	}
	return nil
}

func firstLine(s string) string {
	s = strings.SplitN(s, "\n", 2)[0]
	s = strings.Map(func(r rune) rune {
		if r == '$' || r == '`' || r == '\\' {
			return '_'
		}
		return r
	}, s)
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// Facts is what Probe finds.
type Facts struct {
	Hostname, OS, Kernel, Arch string
	CPUs                       int
	MemoryBytes                int64
	// GPUs are the names of the host's GPUs; GPUVendors their vendors (nvidia, amd, intel, by PCI vendor
	// ID), one per GPU in the same order when the host reported them.
	GPUs, GPUVendors []string
	Agent            bool
}

const factsCmd = `echo "hostname=$(hostname)"
echo "os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") )"
echo "kernel=$(uname -r)"
echo "arch=$(uname -m)"
echo "cpus=$(nproc 2>/dev/null || grep -c ^processor /proc/cpuinfo)"
echo "memkb=$(awk '/^MemTotal:/{print $2}' /proc/meminfo)"
if command -v yonder-agent >/dev/null 2>&1; then echo agent=true; fi
nv=""
if command -v nvidia-smi >/dev/null 2>&1; then nv=$(nvidia-smi --query-gpu=pci.bus_id,name --format=csv,noheader 2>/dev/null); fi
for d in /sys/bus/pci/devices/*; do
  case "$(cat "$d/class" 2>/dev/null)" in 0x03*|0x12*) ;; *) continue ;; esac
  case "$(cat "$d/vendor" 2>/dev/null):$(cat "$d/class")" in
    0x10de:*) v=nvidia; V=NVIDIA ;; 0x1002:*) v=amd; V=AMD ;; 0x8086:0x03*) v=intel; V=Intel ;; *) continue ;;
  esac
  a=${d##*/}
  n=$(printf '%s\n' "$nv" | awk -v a="$a" '{ i = index($0, ","); id = tolower(substr($0, 1, i - 1)); if (i > 1 && substr(id, length(id) - length(a) + 1) == a) { sub(/^[^,]*, */, ""); print; exit } }')
  if [ -z "$n" ] && command -v lspci >/dev/null 2>&1; then n=$(lspci -s "$a" 2>/dev/null | head -n 1 | sed 's/^[^ ]* [^:]*: //'); fi
  echo "gpuvendor=$v"
  echo "gpu=${n:-$V GPU $(cat "$d/device" 2>/dev/null)}"
done
true`

// Probe gathers facts.
func Probe(ctx context.Context, e sshexec.Executor) (Facts, error) {
	out, _, err := e.Run(ctx, factsCmd, nil)
	if err != nil {
		return Facts{}, fmt.Errorf("failed to gather facts: %w", err)
	}
	f, err := ParseFacts(string(out))
	if err != nil {
		return Facts{}, fmt.Errorf("failed to gather facts: %w", err)
	}
	return f, nil
}

// MaxGPUs is how many GPUs Facts lists (the HostFacts API field holds at most that many).
const MaxGPUs = 64

// ParseFacts parses the output of the facts command: one key=value per line, values trimmed, lines
// without "=" and unknown keys ignored. A value left empty (a command the host lacks) stays unknown
// (zero); a CPU or memory figure that is not a count the API can hold is an error naming the line, so a
// host never gets negative or wrapped-around facts recorded.
func ParseFacts(out string) (Facts, error) {
	var f Facts
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "hostname":
			f.Hostname = v
		case "os":
			f.OS = v
		case "kernel":
			f.Kernel = v
		case "arch":
			f.Arch = v
		case "cpus":
			n, err := parseCount(v, math.MaxInt32)
			if err != nil {
				return Facts{}, fmt.Errorf("host reported %q: the CPU count %w", l, err)
			}
			f.CPUs = int(n)
		case "memkb":
			kb, err := parseCount(v, math.MaxInt64/1024)
			if err != nil {
				return Facts{}, fmt.Errorf("host reported %q: MemTotal in kB %w", l, err)
			}
			f.MemoryBytes = kb * 1024
		case "agent":
			f.Agent = v == "true"
		case "gpu":
			if v != "" && len(f.GPUs) < MaxGPUs {
				f.GPUs = append(f.GPUs, v)
			}
		case "gpuvendor":
			if v != "" && len(f.GPUVendors) < MaxGPUs {
				f.GPUVendors = append(f.GPUVendors, v)
			}
		}
	}
	return f, nil
}

// parseCount parses a non-negative decimal count of at most limit; "" is 0 (unknown).
func parseCount(v string, limit int64) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > limit {
		return 0, fmt.Errorf("is not a whole number from 0 to %d", limit)
	}
	return n, nil
}
