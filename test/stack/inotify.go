package stack

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// minInotifyInstances is how many inotify instances root may hold for two management clusters beside the
// workload cluster and its kubelets: every manager (certificate watcher), apiserver, controller-manager,
// kubelet and containerd holds some, and the kernel's default of 128 per user runs out (the manager then
// fails at start with "too many open files"). kind recommends 512 for the same reason.
const minInotifyInstances = 512

const inotifyInstancesPath = "/proc/sys/fs/inotify/max_user_instances"

// EnsureInotifyInstances raises fs.inotify.max_user_instances to at least n (never lowers it) and says so.
// The change is the kernel's runtime setting only; it lasts until reboot.
func EnsureInotifyInstances(n int, log func(string, ...any)) error {
	data, err := os.ReadFile(inotifyInstancesPath)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", inotifyInstancesPath, err)
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("failed to parse %s %q: %w", inotifyInstancesPath, data, err)
	}
	if cur >= n {
		return nil
	}
	if err := os.WriteFile(inotifyInstancesPath, []byte(strconv.Itoa(n)), 0o644); err != nil { //nolint:gosec // a sysctl file
		return fmt.Errorf("failed to raise fs.inotify.max_user_instances from %d to %d (the clusters and kubelets of this machine need it): %w", cur, n, err)
	}
	log("raised fs.inotify.max_user_instances from %d to %d (every kubelet, containerd, systemd and manager holds some)", cur, n)
	return nil
}
