package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/hostruntime/internal/disk"
)

func runAgent(args ...string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func loop(t *testing.T, size int64) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", dev).Run() })
	return dev
}

// TestDiskCommands runs the agent's disk subcommands the way the ramdisk's init does: list with hints,
// write the image the hints choose, clean it again.
func TestDiskCommands(t *testing.T) {
	g := NewWithT(t)
	dev := loop(t, 8<<20)
	hints := `{"deviceName":"` + dev + `"}`

	out, err := runAgent("disk", "list", "--include-loop", "--hints-json", hints)
	g.Expect(err).NotTo(HaveOccurred(), out)
	var listed struct {
		Devices []disk.Device `json:"devices"`
		Root    *disk.Device  `json:"root"`
	}
	g.Expect(json.Unmarshal([]byte(out), &listed)).To(Succeed())
	g.Expect(listed.Root).NotTo(BeNil())
	g.Expect(listed.Root.Path).To(Equal(dev))

	img := make([]byte, 3<<20)
	_, _ = rand.Read(img)
	s := sha256.Sum256(img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(img) }))
	defer srv.Close()
	imageJSON := `{"url":"` + srv.URL + `/os.img","checksum":"` + hex.EncodeToString(s[:]) + `","checksumType":"sha256","format":"raw"}`
	out, err = runAgent("disk", "write", "--include-loop", "--hints-json", hints, "--image-json", imageJSON)
	g.Expect(err).NotTo(HaveOccurred(), out)
	var res disk.Result
	g.Expect(json.Unmarshal([]byte(out), &res)).To(Succeed())
	g.Expect(res.Device).To(Equal(dev))
	g.Expect(res.ImageBytes).To(Equal(int64(len(img))))
	written, err := os.ReadFile(dev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Equal(written[:len(img)], img)).To(BeTrue())

	out, err = runAgent("disk", "clean", "--device", dev)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring(`"device": "` + dev + `"`))
	written, err = os.ReadFile(dev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Count(written[:1<<20], []byte{0})).To(Equal(1<<20), "the first MiB is zeroed")
	g.Expect(bytes.Count(written[len(written)-1<<20:], []byte{0})).To(Equal(1<<20), "the last MiB is zeroed")
}

// TestDiskCommandInput: bad input is refused before anything is read or written.
func TestDiskCommandInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		errText string
	}{
		{"misspelt hint", []string{"disk", "list", "--hints-json", `{"serial":"X"}`}, `--hints-json: json: unknown field "serial"`},
		{"negative size", []string{"disk", "list", "--hints-json", `{"minSizeGigabytes":-1}`}, "minSizeGigabytes must not be negative"},
		{"no image", []string{"disk", "write", "--device", "/dev/null"}, "no image: pass --url and --checksum, or --image-json"},
		{"both image forms", []string{"disk", "write", "--image-json", `{"url":"http://x/i"}`, "--url", "http://x/i"}, "are alternatives"},
		{"device and hints", []string{"disk", "write", "--url", "http://x/i", "--device", "/dev/null", "--hints-json", "{}"}, "--device and --hints-json are alternatives"},
		{"unknown image field", []string{"disk", "write", "--image-json", `{"url":"http://x/i","sum":"1"}`}, `unknown field "sum"`},
		{"clean needs a target", []string{"disk", "clean"}, "give either --all or --device"},
		{"clean with both", []string{"disk", "clean", "--all", "--device", "/dev/null"}, "give either --all or --device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runAgent(tc.args...)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.errText)), out)
		})
	}
}
