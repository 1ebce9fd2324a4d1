package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/gpu"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
)

// Phase names, in order.
const (
	PhasePreflight = "preflight"
	PhaseHost      = "host"
	PhaseArtifacts = "artifacts"
	PhaseRootfs    = "rootfs"
	PhaseConfigure = "configure"
	PhaseMachine   = "machine"
	PhaseBoot      = "boot"
	PhaseJoin      = "join"
	PhaseSentinel  = "sentinel"
)

// Phases lists the bootstrap phases in order.
var Phases = []string{PhasePreflight, PhaseArtifacts, PhaseHost, PhaseRootfs, PhaseConfigure, PhaseMachine, PhaseBoot, PhaseJoin, PhaseSentinel}

// run is one bootstrap in progress.
type run struct {
	o      *Options
	cfg    *agentv1.AgentConfig
	st     *state.State
	store  state.Store
	log    *slog.Logger
	files  map[string]string // artifact name → verified cache path
	image  v1.Image          // the fetched, verified node image (rootfs.image)
	gpu    *gpu.Result
	labels map[string]string
	// changed is set by configure when a file the running machine uses changed.
	changed bool
	// launched is when the machine phase (re)started the machine; zero when it left a running one alone.
	launched time.Time
}

// LoadConfig reads and validates the AgentConfig.
func LoadConfig(path string) (*agentv1.AgentConfig, error) {
	data, err := os.ReadFile(path) //nolint:gosec // paths are the agent's own (state dir, machine tree, cgroupfs)
	if err != nil {
		return nil, fmt.Errorf("cannot read the AgentConfig %s (the bootstrap data writes it; pass --config): %w", path, err)
	}
	cfg, err := agentv1.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("the AgentConfig %s is invalid: %w", path, err)
	}
	return cfg, nil
}

// Bootstrap runs every phase; re-running converges. The returned error is a *PhaseError.
func Bootstrap(ctx context.Context, o Options) error {
	cfg, err := LoadConfig(o.ConfigPath)
	if err != nil {
		return &PhaseError{Phase: "config", Err: err, Hint: "fix the file and run bootstrap again"}
	}
	if err := o.defaults(cfg.NodeName); err != nil {
		return &PhaseError{Phase: "config", Err: err, Hint: "fix the flag"}
	}
	log, closeLog := o.logger()
	defer closeLog()
	store := state.Store{Dir: o.StateDir}
	st, err := store.Load()
	if err != nil {
		return &PhaseError{Phase: "state", Err: err}
	}
	if st.NodeName != "" && st.NodeName != cfg.NodeName {
		return &PhaseError{Phase: "state", Err: fmt.Errorf("this host already is Node %q, the AgentConfig asks for %q", st.NodeName, cfg.NodeName),
			Hint: "run `yonder-agent reset` first, or use another --state-dir"}
	}
	st.NodeName = cfg.NodeName
	if st.Machine != nil && st.Machine.Name == o.baseMachine+GreenSuffix {
		o.useSlot(st.Machine.Name) // an upgrade switched to the green slot
	}
	r := &run{o: &o, cfg: cfg, st: st, store: store, log: log, files: map[string]string{}}
	steps := []struct {
		name string
		fn   func(context.Context) (string, error)
	}{
		{PhasePreflight, r.preflight},
		// Artifacts are verified before the host is changed at all: a corrupt bundle leaves no trace.
		{PhaseArtifacts, r.artifacts},
		{PhaseHost, r.host},
		{PhaseRootfs, r.rootfs},
		{PhaseConfigure, r.configure},
		{PhaseMachine, r.machine},
		{PhaseBoot, r.boot},
		{PhaseJoin, r.join},
		{PhaseSentinel, r.sentinel},
	}
	start := o.Now()
	for _, s := range steps {
		if err := r.phase(ctx, s.name, s.fn); err != nil {
			return err
		}
	}
	log.Info("Bootstrap complete", "node", cfg.NodeName, "seconds", o.Now().Sub(start).Seconds())
	return nil
}

func (r *run) phase(ctx context.Context, name string, fn func(context.Context) (string, error)) error {
	prev := r.st.Phases[name]
	rec := &state.PhaseRecord{Result: state.Started, StartedAt: r.o.Now()}
	if prev != nil {
		rec.Inputs = prev.Inputs
		if prev.Result == state.Started {
			r.log.Info("Resuming interrupted phase", "phase", name)
		}
	}
	r.st.Phases[name] = rec
	if err := r.store.Save(r.st); err != nil {
		return &PhaseError{Phase: name, Err: err, Hint: "check that " + r.o.StateDir + " is writable"}
	}
	r.log.Info("Running phase", "phase", name)
	inputs, err := fn(ctx)
	rec.FinishedAt = r.o.Now()
	rec.DurationSeconds = rec.FinishedAt.Sub(rec.StartedAt).Seconds()
	if err != nil {
		rec.Result, rec.Message = state.Failed, err.Error()
		_ = r.store.Save(r.st)
		pe := &PhaseError{Phase: name, Err: err}
		var h *hinted
		if errors.As(err, &h) {
			pe.Hint = h.hint
		}
		r.log.Error("Phase failed", "phase", name, "err", err.Error(), "hint", pe.Hint)
		return pe
	}
	rec.Result, rec.Inputs = state.Succeeded, inputs
	r.log.Info("Phase done", "phase", name, "seconds", rec.DurationSeconds)
	return r.store.Save(r.st)
}
