package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/yonder-dev/yonder/hostruntime/internal/gpu"
	"github.com/yonder-dev/yonder/hostruntime/internal/render"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
)

// PhaseUpgrade records the last upgrade.
const PhaseUpgrade = "upgrade"

// Upgrade switches a bootstrapped node to a new AgentConfig (new kubelet, containerd, rootfs, flags)
// blue/green: it prepares the other machine slot completely (artifacts verified, rootfs, configuration,
// the kubelet's identity copied), stops the running machine, starts the new one, and verifies the new
// kubelet (healthz, then a fresh Ready heartbeat on the Node). When the new machine does not verify, it is
// stopped and the previous machine started again (rollback); the error says so.
func Upgrade(ctx context.Context, o Options) error {
	cfg, err := LoadConfig(o.ConfigPath)
	if err != nil {
		return &PhaseError{Phase: PhaseUpgrade, Err: err, Hint: "fix the file and run upgrade again"}
	}
	if err := o.defaults(cfg.NodeName); err != nil {
		return &PhaseError{Phase: PhaseUpgrade, Err: err}
	}
	log, closeLog := o.logger()
	defer closeLog()
	store := state.Store{Dir: o.StateDir}
	st, err := store.Load()
	if err != nil {
		return &PhaseError{Phase: PhaseUpgrade, Err: err}
	}
	if st.Machine == nil || st.NodeName != cfg.NodeName {
		return &PhaseError{Phase: PhaseUpgrade, Err: errors.New("this host has no bootstrapped node with that name"), Hint: "run bootstrap first"}
	}
	active := o
	active.useSlot(st.Machine.Name)
	next := o
	next.useSlot(o.otherSlot(st.Machine.Name))
	activeMachine := *st.Machine
	r := &run{o: &next, cfg: cfg, st: st, store: store, log: log, files: map[string]string{}}

	// Prepare the other slot while the node keeps running.
	if err := stopMachine(ctx, &next, ""); err != nil { // leftovers of an earlier, failed upgrade
		return &PhaseError{Phase: PhaseUpgrade, Err: err}
	}
	prevRootfs := st.Phases[PhaseRootfs]
	st.Phases[PhaseRootfs] = nil // the other slot's tree is not the recorded one
	if err := next.machineRoot().Discard(); err != nil {
		return &PhaseError{Phase: PhaseUpgrade, Err: err}
	}
	for _, s := range []struct {
		name string
		fn   func(context.Context) (string, error)
	}{{PhaseArtifacts, r.artifacts}, {PhaseRootfs, r.rootfs}, {PhaseConfigure, r.configure}} {
		if err := r.phase(ctx, s.name, s.fn); err != nil {
			st.Phases[PhaseRootfs] = prevRootfs
			st.Machine = &activeMachine
			_ = store.Save(st)
			return fmt.Errorf("upgrade: preparing machine %s failed, the node keeps running unchanged: %w", next.MachineName, err)
		}
	}
	// The new kubelet keeps the Node's identity: its client certificate and key.
	pki := filepath.Join(render.KubeletCertDir)
	if out, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(active.rootfsDir(), pki), filepath.Dir(filepath.Join(next.rootfsDir(), pki))).CombinedOutput(); err != nil {
		return &PhaseError{Phase: PhaseUpgrade, Err: fmt.Errorf("failed to copy the kubelet's identity: %s: %w", tail(out), err)}
	}
	for _, f := range []string{render.CNIConfFile, render.KubeletKubeconfig} {
		if b, err := os.ReadFile(filepath.Join(active.rootfsDir(), f)); err == nil { //nolint:gosec // the machine's tree
			w := &writer{root: next.rootfsDir()}
			w.file(f, string(b), 0o644)
		}
	}

	rec := &state.PhaseRecord{Result: state.Started, StartedAt: o.Now(), Inputs: activeMachine.Name + "->" + next.MachineName}
	st.Phases[PhaseUpgrade] = rec
	_ = store.Save(st)
	log.Info("Switching machines", "from", activeMachine.Name, "to", next.MachineName)
	switched := time.Now()
	if err := stopMachine(ctx, &active, activeMachine.Unit); err != nil {
		return &PhaseError{Phase: PhaseUpgrade, Err: err}
	}
	r.changed = true
	_, err = r.machine(ctx)
	if err == nil {
		err = verifyKubelet(ctx, r, switched)
	}
	if err != nil {
		return rollback(ctx, rollbackInput{next: next, active: active, activeMachine: activeMachine, run: r, rec: rec, prevRootfs: prevRootfs}, err)
	}
	rec.Result, rec.FinishedAt = state.Succeeded, o.Now()
	rec.DurationSeconds = rec.FinishedAt.Sub(rec.StartedAt).Seconds()
	if err := store.Save(st); err != nil {
		return err
	}
	// Only now: the boot unit converges the active slot with the AgentConfig it names, and until the new
	// machine verified, that was the previous one (a rollback keeps it).
	if _, err := installBootUnit(ctx, &o, cfg.NodeName, log); err != nil {
		return &PhaseError{Phase: PhaseUpgrade, Err: fmt.Errorf("the node runs machine %s, but its boot unit was not updated to this AgentConfig: %w", next.MachineName, err),
			Hint: "run `yonder-agent bootstrap` with this AgentConfig and flags, which converges nothing else and installs the unit"}
	}
	log.Info("Upgrade complete", "machine", next.MachineName, "previous", activeMachine.Name)
	return nil
}

// rollbackInput is what a failed switch needs to go back to the previous machine.
type rollbackInput struct {
	next, active  Options
	activeMachine state.Machine
	run           *run
	rec           *state.PhaseRecord
	prevRootfs    *state.PhaseRecord
}

// rollback stops the new machine that did not verify, starts the previous one again and verifies it.
func rollback(ctx context.Context, in rollbackInput, err error) error {
	r, next, active, activeMachine := in.run, in.next, in.active, in.activeMachine
	st, store, log := r.st, r.store, r.log
	log.Error("New machine did not verify; rolling back", "machine", next.MachineName, "err", err.Error())
	_ = stopMachine(ctx, &next, "")
	rb := rollbackRun(in)
	st.Machine = &activeMachine
	if _, rerr := rb.machine(ctx); rerr != nil {
		return &PhaseError{Phase: PhaseUpgrade, Err: fmt.Errorf("new machine failed (%w) and the rollback to %s failed too: %w", err, activeMachine.Name, rerr),
			Hint: "run `yonder-agent bootstrap` with the previous AgentConfig"}
	}
	rerr := verifyKubelet(ctx, rb, time.Now())
	in.rec.Result, in.rec.Message, in.rec.FinishedAt = state.Failed, "rolled back: "+err.Error(), active.Now()
	st.Phases[PhaseRootfs] = in.prevRootfs
	_ = store.Save(st)
	if rerr != nil {
		return &PhaseError{Phase: PhaseUpgrade, Err: fmt.Errorf("new machine failed (%w); rolled back to %s, which does not verify either: %w", err, activeMachine.Name, rerr)}
	}
	return &PhaseError{Phase: PhaseUpgrade, Err: fmt.Errorf("the new machine %s did not verify, rolled back to %s (running, Node Ready): %w", next.MachineName, activeMachine.Name, err),
		Hint: "check the new AgentConfig's artifacts and flags; the node runs the previous configuration"}
}

// rollbackRun is the run that starts the previous machine again: with the device binds it ran with (the
// GPUs the upgrade's own detection found may differ, e.g. under a new gpu.mode).
func rollbackRun(in rollbackInput) *run {
	r := in.run
	return &run{o: &in.active, cfg: r.cfg, st: r.st, store: r.store, log: r.log, changed: true,
		gpu: &gpu.Result{DeviceNodes: slices.Clone(in.activeMachine.DeviceNodes)}}
}

// verifyKubelet waits for the machine's kubelet to be healthy (healthz on localhost, the machine shares
// the network namespace) and to post a Ready heartbeat newer than since.
func verifyKubelet(ctx context.Context, r *run, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.ReadyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	err := waitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:10248/healthz", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil //nolint:nilerr // not up yet
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("the kubelet's healthz did not answer within %s", r.o.ReadyTimeout)
	}
	cs, err := kubeletClient(r.cfg.APIServer.Endpoint, r.cfg.APIServer.CACertificate, r.o.rootfsDir())
	if err != nil {
		return err
	}
	cutoff := metav1.NewTime(since.Add(-time.Second).Truncate(time.Second))
	return waitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Before(&cutoff) {
				return true, nil
			}
		}
		return false, nil
	})
}
