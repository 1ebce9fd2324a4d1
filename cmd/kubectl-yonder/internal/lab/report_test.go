package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// A lab that fails to get Ready workers quotes the infrastructure manager's last lines about each stuck
// machine (the log file itself may be gone when someone reads the error).
func TestLogLinesAboutQuotesTheLastLinesNamingTheMachine(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "m.log")
	var lines []string
	for i := range 30 {
		name := "lab-md-0-a"
		if i%2 == 1 {
			name = "lab-md-0-b"
		}
		lines = append(lines, "line "+string(rune('A'+i))+" "+name)
	}
	lines = append(lines, "long lab-md-0-a "+strings.Repeat("x", 500))
	g.Expect(os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600)).To(Succeed())

	got := logLinesAbout(path, "lab-md-0-a", 3)
	g.Expect(got).To(HaveLen(3))
	g.Expect(got[0]).To(HavePrefix("line ["))
	g.Expect(got[1]).To(HavePrefix("line ]"))
	g.Expect(got[2]).To(HaveSuffix("…"))
	g.Expect(len(got[2])).To(BeNumerically("<", 410))
	for _, l := range got {
		g.Expect(l).NotTo(ContainSubstring("lab-md-0-b"))
	}
	g.Expect(logLinesAbout(filepath.Join(t.TempDir(), "missing.log"), "x", 3)).To(BeNil())
}
