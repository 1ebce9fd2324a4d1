package sshmachine

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// pollSchedule is when this controller next checks each machine's running bootstrap over SSH. Every
// write of a machine or of its host wakes the machine; without the schedule each wake-up would be
// another SSH connection, credentials read and state check of a run checked a moment ago. It is only a
// schedule: the run's state lives on the host and in status.bootstrap, and a restarted controller,
// knowing no schedule, checks at once.
type pollSchedule struct {
	mu  sync.Mutex
	due map[types.UID]time.Time
}

// next schedules machine uid's next check after d, and returns d.
func (p *pollSchedule) next(uid types.UID, d time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.due == nil {
		p.due = map[types.UID]time.Time{}
	}
	now := time.Now()
	for k, t := range p.due {
		// A machine deleted while its run was checked leaves its entry behind: drop it after an hour.
		if now.Sub(t) > time.Hour {
			delete(p.due, k)
		}
	}
	p.due[uid] = now.Add(d)
	return d
}

// wait returns how long until machine uid's next check is due (0: now, or nothing scheduled).
func (p *pollSchedule) wait(uid types.UID) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.due[uid]
	if !ok {
		return 0
	}
	return max(0, time.Until(t))
}

// forget drops machine uid's schedule (its run finished).
func (p *pollSchedule) forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.due, uid)
}
