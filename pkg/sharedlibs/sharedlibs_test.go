package sharedlibs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// curl's closure is deep (libcurl → libssl → libcrypto …): every entry is an absolute path that exists, the
// indirect libraries are in it, and so is the dynamic loader, under its own path.
func TestClosureListsEveryLibraryAndTheLoader(t *testing.T) {
	g := NewWithT(t)
	deps, err := Closure("/usr/bin/curl")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(deps).To(HaveKey("libcurl.so.4"))
	g.Expect(deps).To(HaveKey("libcrypto.so.3"), "an indirect dependency, through libcurl and libssl")
	loader := false
	for name, path := range deps {
		g.Expect(filepath.IsAbs(path)).To(BeTrue(), name)
		g.Expect(path).To(BeAnExistingFile())
		if strings.HasPrefix(name, "/") && strings.Contains(name, "ld-linux") {
			loader = name == path
		}
	}
	g.Expect(loader).To(BeTrue(), "the dynamic loader is listed under its path: %v", deps)
}

func TestClosureOfSomethingLddCannotReadIsAnError(t *testing.T) {
	g := NewWithT(t)
	notELF := filepath.Join(t.TempDir(), "script")
	g.Expect(os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)).To(Succeed())
	_, err := Closure(notELF)
	g.Expect(err).To(MatchError(ContainSubstring("failed to run ldd")))
}
