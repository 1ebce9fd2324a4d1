package keys

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestLoadOrCreatePersists(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "sub", "private.key")
	k1, err := LoadOrCreate(path)
	g.Expect(err).NotTo(HaveOccurred())
	st, err := os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))

	k2, err := LoadOrCreate(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k2).To(Equal(k1), "a restart must reuse the key")
	g.Expect(k1.PublicKey()).To(Equal(k2.PublicKey()))
}

func TestLoadTightensAndRejectsGarbage(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "k")
	k, err := LoadOrCreate(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.Chmod(path, 0o644)).To(Succeed())
	k2, err := Load(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k2).To(Equal(k))
	st, _ := os.Stat(path)
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))

	bad := filepath.Join(dir, "bad")
	g.Expect(os.WriteFile(bad, []byte("not a key"), 0o600)).To(Succeed())
	_, err = LoadOrCreate(bad)
	g.Expect(err).To(MatchError(ContainSubstring("failed to parse key")))
	b, _ := os.ReadFile(bad)
	g.Expect(string(b)).To(Equal("not a key"), "an unparsable key is never replaced")
}

func TestSlots(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	s, err := LoadSlots(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s).To(Equal(Slots{Current: 0, Next: -1}), "no file: slot 0, as before rotation existed")
	g.Expect(SlotKeyPath(dir, 0)).To(Equal(filepath.Join(dir, "private.key")))
	for _, want := range []Slots{{0, 1}, {1, -1}, {1, 0}, {0, -1}} {
		g.Expect(StoreSlots(dir, want)).To(Succeed())
		got, err := LoadSlots(dir)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(want))
	}
	g.Expect(os.WriteFile(filepath.Join(dir, "slot"), []byte("2\n"), 0o600)).To(Succeed())
	_, err = LoadSlots(dir)
	g.Expect(err).To(MatchError(ContainSubstring(`"2" is not 0, 1`)))
}
