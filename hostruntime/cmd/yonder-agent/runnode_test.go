package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/hostruntime/attest"
)

// reportServer records the reports POSTed to the boot server's report path.
func reportServer(t *testing.T) (*httptest.Server, func() []attest.Report) {
	t.Helper()
	var mu sync.Mutex
	var got []attest.Report
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep attest.Report
		if r.URL.Path != attest.PathReport || json.NewDecoder(r.Body).Decode(&rep) != nil {
			http.Error(w, "bad report", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, rep)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(attest.ReportResponse{Recorded: true})
	}))
	t.Cleanup(srv.Close)
	return srv, func() []attest.Report {
		mu.Lock()
		defer mu.Unlock()
		return append([]attest.Report(nil), got...)
	}
}

// provisionRunNode runs `yonder-agent provision` on run-node instructions carrying userData, against a
// report server, with every path in a temporary directory.
func provisionRunNode(t *testing.T, userData string) (dir, out string, reports []attest.Report, err error) {
	t.Helper()
	dir = t.TempDir()
	srv, got := reportServer(t)
	in := attest.Instructions{
		Version: attest.InstructionsVersion, Action: attest.ActionRunNode, Host: "metal/host-0", ReportToken: "report-token-1",
		UserData: []byte(userData),
		MetaData: json.RawMessage(`{"providerid":"yonder-metal://metal/host-0","local-hostname":"host-0","uuid":"u-1"}`),
	}
	raw, _ := json.Marshal(in)
	instructions := filepath.Join(dir, "instructions.json")
	if err := os.WriteFile(instructions, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runAgent("provision", "--instructions", instructions, "--server", srv.URL, "--set-hostname=false",
		"--provider-id-file", filepath.Join(dir, "etc", "provider-id"), "--bootstrap-script", filepath.Join(dir, "run", "bootstrap.sh"))
	return dir, out, got(), err
}

func TestProvisionRunNodeRunsTheBootstrapDataAndReports(t *testing.T) {
	g := NewWithT(t)
	target := filepath.Join(t.TempDir(), "agent", "config.yaml")
	marker := filepath.Join(filepath.Dir(target), "ran")
	userData := "#cloud-config\nwrite_files:\n- path: " + target + "\n  permissions: '0600'\n  encoding: b64\n  content: dG9rZW46IHNlY3JldAo=\n" +
		"runcmd:\n- [/bin/sh, -c, 'cat " + target + " > " + marker + "; echo bootstrap complete']\n"
	dir, out, reports, err := provisionRunNode(t, userData)
	g.Expect(err).NotTo(HaveOccurred(), out)

	g.Expect(os.ReadFile(target)).To(Equal([]byte("token: secret\n")))
	st, err := os.Stat(target)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	g.Expect(os.ReadFile(marker)).To(Equal([]byte("token: secret\n")), "runcmd runs after write_files")
	g.Expect(os.ReadFile(filepath.Join(dir, "etc", "provider-id"))).To(Equal([]byte("yonder-metal://metal/host-0\n")))
	script, err := os.Stat(filepath.Join(dir, "run", "bootstrap.sh"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(script.Mode().Perm()).To(Equal(os.FileMode(0o700)), "the script holds the token")
	g.Expect(out).To(ContainSubstring("bootstrap complete"), "the commands' output reaches the console")

	g.Expect(reports).To(HaveLen(1))
	g.Expect(reports[0]).To(And(
		HaveField("Host", "metal/host-0"), HaveField("Token", "report-token-1"), HaveField("Action", attest.ActionRunNode),
		HaveField("Success", true), HaveField("Message", ContainSubstring("yonder-metal://metal/host-0"))))
	g.Expect(out).NotTo(ContainSubstring("report-token-1"), "the report token never reaches the console")
	g.Expect(out).NotTo(ContainSubstring("token: secret"), "the user data's content never reaches the console")
}

func TestProvisionRunNodeReportsAFailedBootstrap(t *testing.T) {
	g := NewWithT(t)
	_, out, reports, err := provisionRunNode(t, "#cloud-config\nwrite_files: []\nruncmd:\n- [/bin/sh, -c, 'echo phase artifacts failed: no such blob >&2; exit 3']\n")
	g.Expect(err).To(MatchError(ContainSubstring("phase artifacts failed: no such blob")), out)
	g.Expect(reports).To(HaveLen(1))
	g.Expect(reports[0]).To(And(HaveField("Success", false), HaveField("Action", attest.ActionRunNode),
		HaveField("Message", And(ContainSubstring("exit status 3"), ContainSubstring("phase artifacts failed: no such blob")))))
}

func TestProvisionRunNodeRefusesOtherBootstrapDataBeforeRunningIt(t *testing.T) {
	g := NewWithT(t)
	marker := filepath.Join(t.TempDir(), "ran")
	// kubeadm's bootstrap data uses modules beyond write_files and runcmd: nothing of it may run.
	userData := "#cloud-config\nusers:\n- name: capi\nruncmd:\n- [touch, " + marker + "]\n"
	dir, out, reports, err := provisionRunNode(t, userData)
	g.Expect(err).To(MatchError(ContainSubstring("write_files and runcmd only")), out)
	g.Expect(marker).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(dir, "etc", "provider-id")).NotTo(BeAnExistingFile())
	g.Expect(reports).To(HaveLen(1))
	g.Expect(reports[0]).To(And(HaveField("Success", false), HaveField("Message", ContainSubstring("users"))))
}
