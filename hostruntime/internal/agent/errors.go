package agent

import (
	"fmt"
)

// PhaseError says which phase failed, why, and what to do.
type PhaseError struct {
	Phase string
	Err   error
	Hint  string
}

func (e *PhaseError) Error() string {
	msg := fmt.Sprintf("phase %s failed: %v", e.Phase, e.Err)
	if e.Hint != "" {
		msg += "; what to do: " + e.Hint
	}
	return msg
}

func (e *PhaseError) Unwrap() error { return e.Err }

// hinted lets a phase attach the operator's next step to an error.
type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }

func (h *hinted) Unwrap() error { return h.err }

func withHint(err error, hint string) error { return &hinted{err: err, hint: hint} }

func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
