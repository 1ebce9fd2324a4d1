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

// A SHA-512 crypt(3)-shaped hash: the tests check that it reaches /etc/shadow and no message.
const testHash = "$6$cKxL5hBq1Xc8Y0tE$0cSgv2Hn8t4sZkQ3c3qvD2pW8J8Qj0Jq5m8b3dVgM0sN0q1Jq2J6Ww4GQ7oQ4k6n4rJ1c9x3b5y7z8a0b1c2d3."

// Malformed users, ntp and bootcmd entries are refused with an error naming the entry and key, never
// quoting a password hash, and are not reported as unsupported.
func TestParseRejectsBadModules(t *testing.T) {
	for name, tc := range map[string]struct {
		data string
		want string
	}{
		"user name with command":  {"#cloud-config\nusers:\n- name: '$(reboot)'\n", `users[0].name: "$(reboot)" is not a user name`},
		"user name with option":   {"#cloud-config\nusers:\n- name: '-o'\n", `users[0].name: "-o" is not a user name`},
		"user without name":       {"#cloud-config\nusers:\n- gecos: x\n", "users[0].name: missing"},
		"gecos newline":           {"#cloud-config\nusers:\n- name: a\n  gecos: \"a\\nb\"\n", `users[0].gecos: "a\nb" contains`},
		"group with command":      {"#cloud-config\nusers:\n- name: a\n  groups: 'ok, $(id)'\n", `users[0].groups: "$(id)" is not a group name`},
		"relative homedir":        {"#cloud-config\nusers:\n- name: a\n  homedir: home/a\n", `users[0].homedir: "home/a" is not an absolute path`},
		"shell with NUL":          {"#cloud-config\nusers:\n- name: a\n  shell: \"/bin/sh\\0x\"\n", "users[0].shell:"},
		"inactive not a number":   {"#cloud-config\nusers:\n- name: a\n  inactive: soon\n", `users[0].inactive: "soon" is not a number`},
		"plain text passwd":       {"#cloud-config\nusers:\n- name: a\n  passwd: s3cret-plain\n", "users[0].passwd: is not a crypt(3) hash"},
		"sudo with newline":       {"#cloud-config\nusers:\n- name: a\n  sudo: \"ALL=(ALL) ALL\\nevil ALL=(ALL) ALL\"\n", "users[0].sudo:"},
		"key with newline":        {"#cloud-config\nusers:\n- name: a\n  ssh_authorized_keys: [\"ssh-ed25519 AAAA\\nssh-rsa BBBB\"]\n", "users[0].ssh_authorized_keys:"},
		"users entry":             {"#cloud-config\nusers:\n- [a]\n", "users[0]: neither a name nor a mapping"},
		"ntp server with newline": {"#cloud-config\nntp:\n  servers: [\"a.example\\nserver evil\"]\n", `ntp.servers: "a.example\nserver evil" is not a host name`},
		"ntp not a mapping":       {"#cloud-config\nntp: [a]\n", "failed to parse ntp: not a mapping"},
		"bootcmd map":             {"#cloud-config\nbootcmd: {a: b}\n", "failed to parse bootcmd: not a list"},
		"bootcmd NUL":             {"#cloud-config\nbootcmd:\n- \"echo a\\0b\"\n", "failed to parse bootcmd[0]: contains a NUL byte"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tc.data), Options{})
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(err.Error()).NotTo(ContainSubstring("s3cret-plain"), "no password in a message")
			var u *UnsupportedError
			g.Expect(errors.As(err, &u)).To(BeFalse(), "malformed, not unsupported: %v", err)
		})
	}
}

// Every key that is not run is named in the one error, so the condition tells the operator all of
// them at once.
func TestParseNamesEveryUnsupportedKey(t *testing.T) {
	g := NewWithT(t)
	_, err := Parse([]byte("#cloud-config\npackages: [a]\nmounts: [[swap, none]]\nusers:\n- default\n- name: a\n  snapuser: x\n  inactive: true\nntp:\n  config: {}\n"), Options{})
	var u *UnsupportedError
	g.Expect(errors.As(err, &u)).To(BeTrue(), "%v", err)
	g.Expect(u.Items).To(Equal([]string{
		"key packages", "mounts[0]: swap (a claimed host has no cloud metadata to name its disks: use a /dev path, LABEL= or UUID=)", "ntp.config",
		"users[0]: default (a claimed host has no distro default user; name the user)",
		"users[1].inactive: true (give the days after password expiry instead)", "users[1].snapuser",
	}))
}

// users and ntp parse into what the script runs, with cloud-init's defaults: lock_passwd true, ntp
// enabled, the distro pools when no server is named, nothing when disabled.
func TestParseUsersAndNTP(t *testing.T) {
	g := NewWithT(t)
	cfg, err := Parse([]byte("#cloud-config\nusers:\n- alice\n- name: bob\n  groups: 'docker, wheel'\n  lock_passwd: false\n  sudo: false\n  inactive: 30\n  passwd: '"+testHash+"'\n  ssh_authorized_keys: ssh-ed25519 AAAA bob\nntp:\n  servers: [time.example, 10.0.0.1]\n"), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Users).To(Equal([]User{
		{Name: "alice", LockPasswd: true},
		{Name: "bob", Groups: []string{"docker", "wheel"}, Inactive: "30", Passwd: testHash, SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA bob"}},
	}))
	g.Expect(cfg.NTP).To(Equal(&NTP{Servers: []string{"time.example", "10.0.0.1"}}))
	g.Expect(string(cfg.NTP.chronyConf())).To(ContainSubstring("server time.example iburst\nserver 10.0.0.1 iburst\nkeyfile /etc/chrony/chrony.keys\n"))
	g.Expect(string(cfg.NTP.timesyncdConf())).To(HaveSuffix("[Time]\nNTP=time.example 10.0.0.1\n"))

	cfg, err = Parse([]byte("#cloud-config\nntp: {enabled: true}\n"), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.NTP.Pools).To(HaveLen(4))
	cfg, err = Parse([]byte("#cloud-config\nntp: {enabled: false, servers: [a]}\n"), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.NTP).To(BeNil())
}

// The script runs the modules in cloud-init 22.4's order (bootcmd, write_files, deferred write_files,
// runcmd); a bootcmd `exit 0` ends bootcmd only; list-form commands are argument vectors.
func TestScriptRunsModulesInCloudInitOrder(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	data := "#cloud-config\nbootcmd:\n- test ! -e " + dir + "/early && echo boot >> " + dir + "/order\n- [sh, -c, 'echo \"$1\" >> " + dir + "/order', sh, \"it's $(argv)\"]\n- exit 0\n- echo unreachable >> " + dir + "/order\n" +
		"write_files:\n- path: " + dir + "/deferred\n  content: later\n  defer: true\n- path: " + dir + "/early\n  content: early\n" +
		"runcmd:\n- test -e " + dir + "/deferred && echo run >> " + dir + "/order\n"
	cfg, err := Parse([]byte(data), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	out, err := exec.Command("sh", "-c", cfg.Script()).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	order, err := os.ReadFile(filepath.Join(dir, "order"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(order)).To(Equal("boot\nit's $(argv)\nrun\n"))
}

// A module that fails ends the script with its exit code before runcmd (which would write CABPK's
// sentinel) runs: a failing bootcmd, a file whose owner does not exist (the files after it are not
// written either), a deferred file likewise.
func TestScriptStopsAtAFailingModule(t *testing.T) {
	for name, tc := range map[string]struct {
		modules string
		code    int
		message string
	}{
		"bootcmd":     {"bootcmd:\n- 'false'\n", ExitBootCmd, "yonder-ssh: bootcmd failed"},
		"write_files": {"write_files:\n- path: DIR/a\n  content: x\n  owner: yonder-no-such-user\n- path: DIR/b\n  content: y\n", ExitWriteFiles, "yonder-ssh: write_files failed"},
		"deferred":    {"write_files:\n- path: DIR/a\n  content: x\n  owner: yonder-no-such-user\n  defer: true\n", ExitDeferred, "yonder-ssh: write_files (deferred) failed"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			data := "#cloud-config\n" + strings.ReplaceAll(tc.modules, "DIR", dir) + "runcmd:\n- touch " + dir + "/ran\n"
			cfg, err := Parse([]byte(data), Options{})
			g.Expect(err).NotTo(HaveOccurred())
			out, err := exec.Command("sh", "-c", cfg.Script()).CombinedOutput()
			var exit *exec.ExitError
			g.Expect(errors.As(err, &exit)).To(BeTrue(), "%v: %s", err, out)
			g.Expect(exit.ExitCode()).To(Equal(tc.code), string(out))
			g.Expect(string(out)).To(ContainSubstring(tc.message))
			for _, f := range []string{"ran", "a", "b"} {
				g.Expect(filepath.Join(dir, f)).NotTo(BeAnExistingFile())
			}
		})
	}
}

// Values from the data reach the shell only quoted: a gecos, sudo rule or key holding quotes, `$(…)`
// and backquotes is one single-quoted word; the password hash is only in a printf argument (a shell
// builtin) piped to chpasswd -e.
func TestUsersScriptQuotesEveryValue(t *testing.T) {
	g := NewWithT(t)
	hostile := "it's $(touch /tmp/x) `id` \"q\""
	cfg, err := Parse([]byte("#cloud-config\nusers:\n- name: alice\n  gecos: '"+strings.ReplaceAll(hostile, "'", "''")+"'\n  sudo: '"+strings.ReplaceAll(hostile, "'", "''")+"'\n  ssh_authorized_keys: ['"+strings.ReplaceAll(hostile, "'", "''")+"']\n  hashed_passwd: '"+testHash+"'\n"), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	script := cfg.Script()
	quoted := `'it'\''s $(touch /tmp/x) ` + "`id`" + ` "q"'`
	g.Expect(strings.Count(script, quoted)).To(Equal(3), "the gecos; the key, checked then written")
	g.Expect(strings.Count(script, `'alice it'\''s $(touch /tmp/x)`)).To(Equal(2), "the sudo rule, checked then written")
	g.Expect(script).To(ContainSubstring("printf '%s\\n' 'alice:" + testHash + "' | chpasswd -e\n"))
	g.Expect(strings.Count(script, testHash)).To(Equal(1))
	msg, err := shellParses(script)
	g.Expect(err).NotTo(HaveOccurred(), msg)
}
