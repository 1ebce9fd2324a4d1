package cloudinit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestParseReportsUnsupported(t *testing.T) {
	for name, tc := range map[string]struct {
		data string
		want string
	}{
		"unknown key":      {"#cloud-config\npackages: [nginx]\nruncmd:\n- true\n", "key packages"},
		"not cloud-config": {"#!/bin/sh\necho hi\n", "not #cloud-config"},
		"jinja other":      {"## template: jinja\n#cloud-config\nruncmd:\n- echo {{ ds.meta_data.instance_id }}\n", "ds.meta_data.instance_id"},
		"default user":     {"#cloud-config\nusers:\n- default\n- name: alice\n", "users[0]: default"},
		"user key":         {"#cloud-config\nusers:\n- name: alice\n  plain_text_passwd: hunter2\n", "users[0].plain_text_passwd"},
		"ntp client":       {"#cloud-config\nntp:\n  ntp_client: ntpd\n", "ntp.ntp_client"},
		"cloud disk names": {"#cloud-config\ndisk_setup: {ephemeral0: {layout: true}}\nfs_setup: [{device: ephemeral0, filesystem: ext4}]\nmounts: [[ephemeral0, /mnt]]\n", "disk_setup[ephemeral0] (a claimed host"},
		"partition auto":   {"#cloud-config\nfs_setup: [{device: /dev/sdb, partition: auto, filesystem: ext4}]\n", "fs_setup[0].partition: auto (name the partition number or none)"},
		"custom mkfs":      {"#cloud-config\nfs_setup: [{device: /dev/sdb, filesystem: ext4, cmd: 'mkfs -t %(filesystem)s'}]\n", "fs_setup[0].cmd"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tc.data), Options{Hostname: "h"})
			var u *UnsupportedError
			g.Expect(errors.As(err, &u)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}
}

// Script output, run by a real shell in a temporary root: files with their content, modes and
// encodings, runcmd in order with list-form quoting, a failing command not stopping the next.
func TestScriptWritesFilesAndRunsCommands(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	data := "## template: jinja\n#cloud-config\nwrite_files:\n- path: " + dir + "/a/b.txt\n  content: 'hi {{ ds.meta_data.local_hostname }}'\n  permissions: '0600'\n" +
		"- path: " + dir + "/c.txt\n  encoding: gzip+b64\n  content: H4sIAAAAAAAAA8tIzcnJBwCGphA2BQAAAA==\n" +
		"- path: " + dir + "/a/b.txt\n  content: \"\\nmore\"\n  append: true\n  permissions: '0600'\n" +
		"runcmd:\n- [sh, -c, \"echo 'it''s' > " + dir + "/d.txt\"]\n- false\n- echo after >> " + dir + "/d.txt\n"
	cfg, err := Parse([]byte(data), Options{Hostname: "node-1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.WriteFiles).To(HaveLen(3))
	script := cfg.Script()
	g.Expect(script).NotTo(ContainSubstring("hi node-1"), "content travels base64-encoded")
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	b, _ := os.ReadFile(filepath.Join(dir, "a/b.txt"))
	g.Expect(string(b)).To(Equal("hi node-1\nmore"))
	st, _ := os.Stat(filepath.Join(dir, "a/b.txt"))
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	c, _ := os.ReadFile(filepath.Join(dir, "c.txt"))
	g.Expect(string(c)).To(Equal("hello"))
	d, _ := os.ReadFile(filepath.Join(dir, "d.txt"))
	g.Expect(string(d)).To(Equal("its\nafter\n"))
}

// A runcmd line that is not valid shell cannot break the script: the files are still written, the
// lines before it run (a construct spanning lines too), the error ends the script with sh's status 2
// and its message, and the lines after it do not run, as in cloud-init's own runcmd script. A stray `}`
// does not close anything of the script's.
func TestScriptRunsRuncmdLinesUpToASyntaxError(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	data := "#cloud-config\nwrite_files:\n- path: " + dir + "/f\n  content: x\n" +
		"runcmd:\n- 'if true; then'\n- echo one >> " + dir + "/log\n- fi\n- echo two >> " + dir + "/log\n- '} ('\n- echo three >> " + dir + "/log\n"
	cfg, err := Parse([]byte(data), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	script := cfg.Script()
	out, err := shellParses(script)
	g.Expect(err).NotTo(HaveOccurred(), out)
	out2, err := exec.Command("sh", "-c", script).CombinedOutput()
	var exit *exec.ExitError
	g.Expect(errors.As(err, &exit)).To(BeTrue(), "%v", err)
	g.Expect(exit.ExitCode()).To(Equal(2), string(out2))
	g.Expect(string(out2)).To(ContainSubstring("Syntax error"))
	g.Expect(filepath.Join(dir, "f")).To(BeAnExistingFile())
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(log)).To(Equal("one\ntwo\n"))
}

// Malformed data is refused with an error that names the entry and the key at fault, and is not
// reported as unsupported cloud-init (the condition's reason tells those apart).
func TestParseRejectsBadFiles(t *testing.T) {
	for name, tc := range map[string]struct {
		data string
		want []string
	}{
		"relative path": {"#cloud-config\nwrite_files:\n- path: a\n", []string{`write_files[0]: path "a" is not absolute`}},
		"NUL in path":   {"#cloud-config\nwrite_files:\n- path: \"/etc/a\\0b\"\n", []string{`write_files[0]: path "/etc/a\x00b" contains a NUL byte`}},
		"bad mode":      {"#cloud-config\nwrite_files:\n- path: /a\n- path: /b\n  permissions: 'rwx'\n", []string{`write_files[1]: permissions "rwx" are not octal`}},
		"bad owner":     {"#cloud-config\nwrite_files:\n- path: /a\n  owner: 'a b;rm'\n", []string{`write_files[0]: owner "a b;rm" is not user[:group]`}},
		"bad b64":       {"#cloud-config\nwrite_files:\n- path: /a\n  encoding: b64\n  content: '%%%'\n", []string{"write_files[0] (/a): illegal base64 data"}},
		"bad encoding":  {"#cloud-config\nwrite_files:\n- path: /a\n  encoding: rot13\n", []string{`write_files[0] (/a): unknown encoding "rot13"`}},
		"unknown field": {"#cloud-config\nwrite_files:\n- path: /a\n  mode: '0600'\n", []string{`failed to parse write_files: `, `unknown field "mode"`}},
		"runcmd map":    {"#cloud-config\nruncmd: {a: b}\n", []string{"failed to parse runcmd: not a list"}},
		"runcmd entry":  {"#cloud-config\nruncmd:\n- echo\n- {a: b}\n", []string{"failed to parse runcmd[1]: neither a string nor a list"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tc.data), Options{})
			g.Expect(err).To(HaveOccurred())
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			var u *UnsupportedError
			g.Expect(errors.As(err, &u)).To(BeFalse(), "malformed, not unsupported: %v", err)
		})
	}
}

// FuzzParse: untrusted bootstrap data never panics the parser, and whatever parses renders a script
// that /bin/sh (dash here, the shell the script's #!/bin/sh names) parses: a path, owner, mode or
// runcmd line cannot break the script's structure.
func FuzzParse(f *testing.F) {
	f.Add([]byte("#cloud-config\nwrite_files:\n- path: /a\n  content: x\nruncmd:\n- echo\n"))
	f.Add([]byte("## template: jinja\n#cloud-config\nruncmd:\n- echo {{ ds.meta_data.local_hostname }}\n"))
	f.Add([]byte("#cloud-config\nwrite_files:\n- path: /a\n  encoding: gz+b64\n  content: H4sIAAAAAAAAA8tIzcnJBwCGphA2BQAAAA==\n"))
	f.Add([]byte("#cloud-config\nwrite_files:\n- path: \"/a b/'c'\\n$(x)\"\n  owner: 'a:b'\n  permissions: '600'\n  append: true\nruncmd:\n- [\"it's\", '\"$x\"', \"\\n\"]\n- 'if true; then echo \"}\"; fi'\n"))
	f.Add([]byte("#cloud-config\nbootcmd:\n- [echo, \"$(x)\"]\nusers:\n- name: a\n  gecos: \"'$(x)'\"\n  groups: b, c\n  sudo: ['ALL=(ALL) ALL']\n  ssh_authorized_keys: [\"k '$x'\"]\nntp: {servers: [a.example]}\n"))
	f.Add([]byte("#cloud-config\ndisk_setup: {/dev/sdb: {table_type: gpt, layout: [[50, 82], 50]}}\nfs_setup: [{device: sdb, partition: 1, filesystem: ext4, label: x, extra_opts: [\"-E\", \"$(y)\"]}]\nmounts: [[LABEL=x, /m]]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, Options{Hostname: "h"})
		if err != nil {
			return
		}
		script := cfg.Script()
		if !strings.HasPrefix(script, "#!/bin/sh\n") {
			t.Fatalf("the script is not for /bin/sh:\n%s", script)
		}
		if msg, err := shellParses(script); err != nil {
			t.Fatalf("sh -n refuses the script rendered from %q: %v: %s\n%s", data, err, msg, script)
		}
	})
}

// shellParses runs `sh -n` (dash here, the shell the script's #!/bin/sh names) with script on stdin:
// it parses the script without running anything.
func shellParses(script string) (string, error) {
	cmd := exec.Command("sh", "-n")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A file holding a secret has its final mode from its first byte: base64 (which writes the content) is
// wrapped to record the mode of the file it writes to as it starts. Covered: a new file, a file that
// already exists with a wider mode, and an append to a file that exists with a wider mode.
func TestScriptWritesFilesWithTheirFinalModeFromTheFirstByte(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	base64Path, err := exec.LookPath("base64")
	g.Expect(err).NotTo(HaveOccurred())
	bin, log := filepath.Join(dir, "bin"), filepath.Join(dir, "modes")
	g.Expect(os.Mkdir(bin, 0o755)).To(Succeed())
	// The mode is read before the redirection to the log: /proc/$$/fd/1 is then still the file written.
	wrapper := "#!/bin/sh\nm=$(stat -L -c '%a' /proc/$$/fd/1)\necho \"$m\" >> '" + log + "'\nexec '" + base64Path + "' \"$@\"\n"
	g.Expect(os.WriteFile(filepath.Join(bin, "base64"), []byte(wrapper), 0o755)).To(Succeed())
	for _, name := range []string{"existing", "appended"} {
		g.Expect(os.WriteFile(filepath.Join(dir, name), []byte("old\n"), 0o644)).To(Succeed())
		g.Expect(os.Chmod(filepath.Join(dir, name), 0o644)).To(Succeed())
	}
	data := "#cloud-config\nwrite_files:\n" +
		"- path: " + dir + "/new/token\n  content: secret-1\n  permissions: '0600'\n" +
		"- path: " + dir + "/existing\n  content: secret-2\n  permissions: '0600'\n" +
		"- path: " + dir + "/appended\n  content: secret-3\n  permissions: '0640'\n  append: true\n"
	cfg, err := Parse([]byte(data), Options{Hostname: "h"})
	g.Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command("sh", "-c", cfg.Script())
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	modes, err := os.ReadFile(log)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(string(modes))).To(Equal([]string{"600", "600", "640"}), "the mode of each file as its content is written")
	for name, want := range map[string]struct {
		content string
		mode    os.FileMode
	}{"new/token": {"secret-1", 0o600}, "existing": {"secret-2", 0o600}, "appended": {"old\nsecret-3", 0o640}} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(b)).To(Equal(want.content), name)
		st, err := os.Stat(filepath.Join(dir, name))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Mode().Perm()).To(Equal(want.mode), name)
	}
	left, err := filepath.Glob(filepath.Join(dir, "*", ".yonder-write.*"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty(), "no temporary file stays")
}
