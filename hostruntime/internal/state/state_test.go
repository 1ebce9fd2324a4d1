package state

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestSaveLoadRoundTripAndCorruption(t *testing.T) {
	g := NewWithT(t)
	s := Store{Dir: t.TempDir()}
	st, err := s.Load()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phases).To(BeEmpty())
	st.NodeName = "n1"
	st.Phases["rootfs"] = &PhaseRecord{Result: Succeeded, Inputs: "abc", StartedAt: time.Unix(1, 0).UTC()}
	st.Sysctls = map[string]string{"kernel.panic": "0"}
	g.Expect(s.Save(st)).To(Succeed())
	got, err := s.Load()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(st))
	entries, _ := os.ReadDir(s.Dir)
	g.Expect(entries).To(HaveLen(1), "no temporary files left")

	g.Expect(os.WriteFile(s.Path(), []byte("{half"), 0o600)).To(Succeed())
	_, err = s.Load()
	g.Expect(err).To(MatchError(ContainSubstring("corrupt")))
}
