// Package state records what yonder-agent did on a host, so that a re-run converges instead of
// repeating work, a crash in the middle of a phase is recovered (the phase is found "Started" and run
// again; every phase is idempotent) and reset knows exactly what to undo.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// FileName is the state file inside the state directory.
const FileName = "state.json"

// Phase results.
const (
	// Started means the phase began and has not finished (a crash, or still running).
	Started = "Started"
	// Succeeded means the phase finished; Inputs says with what.
	Succeeded = "Succeeded"
	// Failed means the phase returned an error; Message says why.
	Failed = "Failed"
)

// PhaseRecord is the outcome of one phase.
type PhaseRecord struct {
	// Result is Started, Succeeded or Failed.
	Result string `json:"result"`
	// Inputs is a digest of what the phase acted on (e.g. the rootfs archive's sha256), so that a changed
	// input re-runs the phase.
	Inputs string `json:"inputs,omitempty"`
	// Message explains a failure.
	Message string `json:"message,omitempty"`
	// StartedAt and FinishedAt bound the phase's last run.
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// DurationSeconds is FinishedAt-StartedAt.
	DurationSeconds float64 `json:"durationSeconds,omitempty"`
}

// Machine records the running nspawn machine.
type Machine struct {
	// Name of the machine (also the name of its cgroup subtree).
	Name string `json:"name"`
	// Base is the machine name without its blue/green slot suffix.
	Base string `json:"base,omitempty"`
	// Rootfs is its root directory.
	Rootfs string `json:"rootfs"`
	// LauncherPID is the systemd-nspawn process (direct launch), 0 under systemd units.
	LauncherPID int `json:"launcherPID,omitempty"`
	// Unit is the systemd unit running it when the host runs systemd.
	Unit string `json:"unit,omitempty"`
	// ConfigDigest is the digest of the launch configuration (argv, binds); a change restarts it.
	ConfigDigest string `json:"configDigest,omitempty"`
	// DeviceNodes are the /dev entries (GPUs) bound into it, relative to /dev: an upgrade's rollback
	// starts it again with the same ones.
	DeviceNodes []string `json:"deviceNodes,omitempty"`
	// StartedAt is when it was (last) launched.
	StartedAt time.Time `json:"startedAt,omitzero"`
}

// State is everything the agent recorded on this host.
type State struct {
	// NodeName is the Node this host became.
	NodeName string `json:"nodeName,omitempty"`
	// Phases by name.
	Phases map[string]*PhaseRecord `json:"phases,omitempty"`
	// Sysctls holds the host's original values of every sysctl the agent changed (restored by reset).
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Machine is the nspawn machine, when one was launched.
	Machine *Machine `json:"machine,omitempty"`
	// Sentinel is the bootstrap-success file written, when written.
	Sentinel string `json:"sentinel,omitempty"`
	// CgroupPaths are the cgroup directories created for the machine (removed by reset).
	CgroupPaths []string `json:"cgroupPaths,omitempty"`
	// GPU is the detected GPU summary.
	GPU map[string]string `json:"gpu,omitempty"`
	// Network is the host network namespace as the agent found it before the first machine started.
	Network *Network `json:"network,omitempty"`
}

// Network is what the node's network namespace held before the node's machine first ran, so reset can
// give back exactly that: the per-namespace sysctls the node's CNI plugins change, and the netfilter
// tables that existed (tables the kubelet or the CNI plugins created are removed when left empty).
type Network struct {
	// NamespacePath is the namespace (--network-namespace-path); empty: the agent's own.
	NamespacePath string `json:"namespacePath,omitempty"`
	// Sysctls are the namespace's original values ("net.ipv4.ip_forward" → "0").
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Tables are the nftables tables present, as "<family> <name>" ("ip filter").
	Tables []string `json:"tables,omitempty"`
	// Links are the names of the links present (reset removes only the network add-on's links that were
	// not, see agent.addonLinkPrefix).
	Links []string `json:"links,omitempty"`
}

// Store reads and writes the state file atomically.
type Store struct {
	// Dir is the state directory (default /var/lib/yonder).
	Dir string
}

// Path is the state file's path.
func (s Store) Path() string { return filepath.Join(s.Dir, FileName) }

// Load returns the recorded state, or an empty one when none exists.
func (s Store) Load() (*State, error) {
	st := &State{Phases: map[string]*PhaseRecord{}}
	data, err := os.ReadFile(s.Path())
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read state %s: %w", s.Path(), err)
	}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt (move it aside and run reset or bootstrap again): %w", s.Path(), err)
	}
	if st.Phases == nil {
		st.Phases = map[string]*PhaseRecord{}
	}
	return st, nil
}

// Save writes the state atomically (temporary file + rename), so a crash never leaves half a file.
func (s Store) Save(st *State) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("failed to create state directory %s: %w", s.Dir, err)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.Dir, ".state-*.json")
	if err != nil {
		return fmt.Errorf("failed to write state in %s: %w", s.Dir, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.Path())
}
