package hostprep

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
)

func fakeProcSys(t *testing.T, values map[string]string) Sysctls {
	t.Helper()
	root := t.TempDir()
	s := Sysctls{Root: root}
	for k, v := range values {
		p := s.path(k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// A re-run must not record the agent's own values as the host's originals, and restore puts the
// host's values back.
func TestApplyRecordsOriginalsOnceAndRestoreReturnsThem(t *testing.T) {
	g := NewWithT(t)
	s := fakeProcSys(t, map[string]string{"vm.overcommit_memory": "0", "kernel.panic": "0", "vm.panic_on_oom": "0"})
	want := map[string]string{"vm.overcommit_memory": "1", "kernel.panic": "10", "vm.panic_on_oom": "0"}
	saved := map[string]string{}
	changed, err := s.Apply(want, saved)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(ConsistOf("vm.overcommit_memory", "kernel.panic"))
	g.Expect(saved).To(Equal(map[string]string{"vm.overcommit_memory": "0", "kernel.panic": "0"}))

	changed, err = s.Apply(want, saved)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeEmpty())
	g.Expect(saved).To(Equal(map[string]string{"vm.overcommit_memory": "0", "kernel.panic": "0"}))

	g.Expect(s.Restore(saved)).To(Succeed())
	g.Expect(saved).To(BeEmpty())
	for k, v := range map[string]string{"vm.overcommit_memory": "0", "kernel.panic": "0"} {
		got, err := s.Get(k)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(v))
	}
}

func TestApplyReportsTheMissingSysctl(t *testing.T) {
	g := NewWithT(t)
	s := fakeProcSys(t, nil)
	_, err := s.Apply(map[string]string{"kernel.panic": "10"}, map[string]string{})
	g.Expect(err).To(MatchError(ContainSubstring("kernel.panic")))
}

// Two nodes on one host: the originals are recorded once, kept while either node runs, and restored
// when the last one is reset.
func TestRegistryRestoresWhenTheLastHolderReleases(t *testing.T) {
	g := NewWithT(t)
	s := fakeProcSys(t, map[string]string{"kernel.panic": "0", "vm.overcommit_memory": "0"})
	r := Registry{Dir: filepath.Join(t.TempDir(), "reg"), Sysctls: s}
	want := map[string]string{"kernel.panic": "10", "vm.overcommit_memory": "1"}
	changed, orig, err := r.Acquire("node-a", want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(HaveLen(2))
	g.Expect(orig).To(Equal(map[string]string{"kernel.panic": "0", "vm.overcommit_memory": "0"}))
	changed, orig, err = r.Acquire("node-b", want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeEmpty())
	g.Expect(orig).To(HaveKeyWithValue("kernel.panic", "0"), "the second node must not record the first node's values")

	restored, remaining, err := r.Release("node-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restored).To(BeEmpty())
	g.Expect(remaining).To(Equal([]string{"node-b"}))
	g.Expect(s.Get("kernel.panic")).To(Equal("10"), "node-b's kubelet still needs it")

	restored, _, err = r.Release("node-b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restored).To(ConsistOf("kernel.panic", "vm.overcommit_memory"))
	g.Expect(s.Get("kernel.panic")).To(Equal("0"))
	g.Expect(filepath.Join(r.Dir, "holders")).NotTo(BeAnExistingFile(), "the last node empties the registry")
	g.Expect(filepath.Join(r.Dir, "originals.json")).NotTo(BeAnExistingFile(), "the last node empties the registry")
	// The lock file stays: removed, a waiting agent and the next one would lock different files.
	g.Expect(filepath.Join(r.Dir, ".lock")).To(BeAnExistingFile())
	_, _, err = r.Acquire("node-c", want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Get("kernel.panic")).To(Equal("10"), "an emptied registry works for the next node")
}

// The host's own values stay readable while nodes hold the sysctls (other agents on the host change the
// current values), and reading them never creates the registry.
func TestHostValuesAreTheOriginalsWhileNodesHoldThem(t *testing.T) {
	g := NewWithT(t)
	s := fakeProcSys(t, map[string]string{"kernel.panic": "0", "vm.panic_on_oom": "0"})
	r := Registry{Dir: filepath.Join(t.TempDir(), "reg"), Sysctls: s}
	names := []string{"kernel.panic", "vm.panic_on_oom"}
	host := map[string]string{"kernel.panic": "0", "vm.panic_on_oom": "0"}

	values, holders, err := r.HostValues(names)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(values).To(Equal(host))
	g.Expect(holders).To(BeEmpty())
	g.Expect(r.Dir).NotTo(BeAnExistingFile(), "reading must not create the registry")

	_, _, err = r.Acquire("node-a", map[string]string{"kernel.panic": "10", "vm.panic_on_oom": "0"})
	g.Expect(err).NotTo(HaveOccurred())
	values, holders, err = r.HostValues(names)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(values).To(Equal(host), "the recorded original, not node-a's value")
	g.Expect(holders).To(Equal([]string{"node-a"}))

	_, _, err = r.Release("node-a")
	g.Expect(err).NotTo(HaveOccurred())
	values, holders, err = r.HostValues(names)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(values).To(Equal(host))
	g.Expect(holders).To(BeEmpty())
}

// Nodes coming and going at once (agents of several hosts on one kernel) never fail on the registry, and
// the host's values are back when the last one leaves.
func TestRegistryUnderConcurrentNodes(t *testing.T) {
	g := NewWithT(t)
	s := fakeProcSys(t, map[string]string{"kernel.panic": "0"})
	r := Registry{Dir: filepath.Join(t.TempDir(), "reg"), Sysctls: s}
	errs := make(chan error, 8*20*2)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				_, _, err := r.Acquire(fmt.Sprintf("node-%d", i), map[string]string{"kernel.panic": "10"})
				errs <- err
				_, _, err = r.Release(fmt.Sprintf("node-%d", i))
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(s.Get("kernel.panic")).To(Equal("0"))
}
