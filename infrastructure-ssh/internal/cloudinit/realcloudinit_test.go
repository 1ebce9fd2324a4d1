package cloudinit_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	cabpk "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"

	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/cloudinit"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/osimage"
)

// realHostname is the worker's name: the NoCloud meta-data's local-hostname for cloud-init, Options.Hostname for Parse.
const realHostname = "yci-worker-0"

// realOrderLog is where every command of the data, and the kubeadm stand-in, appends a marker.
const realOrderLog = "/var/log/yci-order"

// realKubeadm stands in for kubeadm (a real join needs a control plane): it logs its argv and whether the
// join configuration CABPK's data wrote is there, rendered for this worker, and fails if not.
const realKubeadm = `#!/bin/sh
echo "kubeadm $*" >> ` + realOrderLog + `
if grep -qx '  name: ` + realHostname + `' /run/kubeadm/kubeadm-join-config.yaml; then
	echo kubeadm-sees-rendered-join-config >> ` + realOrderLog + `
else
	echo kubeadm-join-config-not-rendered >> ` + realOrderLog + `
	exit 3
fi
`

// realCABPKWorker renders, with CABPK's own renderer, a worker using every part of a KubeadmConfig that
// turns into bootcmd, write_files and runcmd: boot commands (one spanning lines), pre and post kubeadm
// commands (one failing, which must not stop the next), files in clear, base64 and gzip+base64, with
// owners (user only, user:group) and modes (set-ID and sticky bits too), one replacing a file of the
// image, one written then appended to, one appended to a file of the image, and the JoinConfiguration
// naming the node by the jinja expression CABPK's users put there.
func realCABPKWorker(t *testing.T) []byte {
	t.Helper()
	log := " >> " + realOrderLog
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return base64.StdEncoding.EncodeToString(b.Bytes())
	}
	in := &cabpk.NodeInput{
		BaseUserData: cabpk.BaseUserData{
			BootCommands: []string{
				"echo bootcmd-1" + log,
				"if test -e /etc/yci/plain.conf; then echo bootcmd-sees-files" + log + "; else echo bootcmd-before-files" + log + "; fi",
				"for i in a b; do\n  echo bootcmd-loop-$i" + log + "\ndone",
			},
			PreKubeadmCommands: []string{
				"echo pre-1" + log,
				"stat -c 'pre-sees %n %a %U:%G' /etc/yci/plain.conf /run/kubeadm/kubeadm-join-config.yaml" + log,
				"false",
				"echo \"pre-2 after false, umask $(umask)\"" + log,
			},
			PostKubeadmCommands: []string{
				"echo post-1" + log,
				"test -f /run/cluster-api/bootstrap-success.complete && echo post-sees-sentinel" + log,
			},
			AdditionalFiles: []bootstrapv1.File{
				{Path: "/etc/yci/plain.conf", Owner: "daemon:adm", Permissions: "0640",
					Content: "key: value\nquote: it's $HOME \\ and \"x\" {not jinja}\ntab\there, trailing spaces   \n\nafter a blank line\n"},
				{Path: "/etc/yci/no-newline", Content: "no newline at the end"},
				{Path: "/etc/yci/b64.bin", Encoding: bootstrapv1.Base64, Permissions: "0600",
					Content: base64.StdEncoding.EncodeToString([]byte("\x00\x01binary\xff\n"))},
				{Path: "/etc/yci/deep/nested/gz.txt", Encoding: bootstrapv1.GzipBase64, Owner: "nobody:nogroup", Permissions: "0444",
					Content: gz("compressed\ncontent\n")},
				{Path: "/etc/yci/append.conf", Owner: "daemon:daemon", Permissions: "0600", Content: "first\n"},
				{Path: "/etc/yci/append.conf", Content: "second\n", Append: ptr.To(true)},
				{Path: "/etc/issue.net", Content: "appended to the image's file\n", Append: ptr.To(true)},
				{Path: "/etc/issue", Permissions: "0600", Content: "replaces the image's file\n"},
				// chown after chmod, in cloud-init as here: the kernel drops the set-user-ID bit (and set-group-ID
				// on a group-executable file) when the owner changes.
				{Path: "/etc/yci/setuid", Owner: "daemon", Permissions: "4755", Content: "#!/bin/sh\n"},
				{Path: "/etc/yci/setgid", Owner: "daemon:adm", Permissions: "2750", Content: "#!/bin/sh\n"},
				{Path: "/etc/yci/sticky", Permissions: "1644", Content: "x\n"},
				{Path: "/usr/local/bin/kubeadm", Permissions: "0755", Content: realKubeadm},
			},
		},
		JoinConfiguration: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration:\n  name: {{ ds.meta_data.local_hostname }}\n",
	}
	data, err := cabpk.NewNode(in)
	if err != nil {
		t.Fatalf("CABPK cannot render: %v", err)
	}
	return data
}

// realReport prints, from inside a copy, the order log and a manifest of every file and directory the
// data wrote (path, type, mode, owner:group, base64 content).
const realReport = `set -e
echo '== order'
cat ` + realOrderLog + `
echo '== files'
find /etc/yci /run/kubeadm /run/cluster-api /etc/issue /etc/issue.net /usr/local/bin/kubeadm | sort | while read -r p; do
	if [ -d "$p" ]; then
		echo "$p dir $(stat -c '%a %U:%G' "$p")"
	else
		echo "$p file $(stat -c '%a %U:%G' "$p") $(base64 -w0 "$p")"
	fi
done
`

// realCloudInitConfig points the image's cloud-init at the NoCloud seed (its own configuration names
// the bare-metal provider's config drive), and turns away what a copy of the image cannot do and this
// test does not compare: Debian's default locale en_US.UTF-8, which the image does not generate (the
// locale module fails on it: C.UTF-8 is always there), growing and resizing the root filesystem (an
// overlay here, no block device).
const realCloudInitConfig = `datasource_list: [ NoCloud, None ]
locale: C.UTF-8
resize_rootfs: false
growpart: {mode: "off"}
`

// realKubeadmFile places the kubeadm stand-in in a copy (where the data has its own kubeadm file, that
// replaces it in both runs).
var realKubeadmFile = osimage.File{Path: "/usr/local/bin/kubeadm", Mode: 0o755, Content: []byte(realKubeadm)}

// realSeed is what a copy needs for the image's cloud-init to take data as this worker's user data on
// a first boot: the NoCloud seed with the worker's meta-data, the configuration above, the kubeadm stand-in.
func realSeed(data []byte) []osimage.File {
	return []osimage.File{
		realKubeadmFile,
		{Path: "/var/lib/cloud/seed/nocloud/user-data", Mode: 0o600, Content: data},
		{Path: "/var/lib/cloud/seed/nocloud/meta-data", Mode: 0o600, Content: []byte("instance-id: iid-" + realHostname + "\nlocal-hostname: " + realHostname + "\n")},
		{Path: "/etc/cloud/cloud.cfg.d/99_yci_nocloud.cfg", Mode: 0o644, Content: []byte(realCloudInitConfig)},
	}
}

// realStages are cloud-init's stages in the order its systemd units run them on first boot (each exits 1
// when one of its modules failed).
var realStages = []string{"init --local", "init", "modules --mode=config", "modules --mode=final"}

// runRealCloudInit runs data through the image's real cloud-init in a fresh copy, stopping at the first
// stage that fails. report runs in the same copy afterwards.
func runRealCloudInit(ctx context.Context, img osimage.Image, data []byte, report string) (osimage.CopyResult, error) {
	return img.RunInCopy(ctx, osimage.CopyRun{
		Files:   realSeed(data),
		Command: "set -e\ncloud-init " + strings.Join(realStages, "\ncloud-init ") + "\n",
		Report:  report,
	})
}

// runOurs runs data through Parse + Script in a fresh copy, as remote.Start runs the script (sh, stdin
// from /dev/null), with the same kubeadm stand-in.
func runOurs(ctx context.Context, img osimage.Image, data []byte, report string) (osimage.CopyResult, error) {
	cfg, err := cloudinit.Parse(data, cloudinit.Options{Hostname: realHostname})
	if err != nil {
		return osimage.CopyResult{}, err
	}
	return img.RunInCopy(ctx, osimage.CopyRun{
		Files:   []osimage.File{realKubeadmFile, {Path: "/root/yonder-bootstrap.sh", Mode: 0o700, Content: []byte(cfg.Script())}},
		Command: "sh /root/yonder-bootstrap.sh",
		Report:  report,
	})
}

// bootRealCloudInit boots a cloud-image host (test/hosts) named after the worker, with data as its NoCloud
// user data and the kubeadm stand-in in the image, and waits for the image's cloud-init to finish the
// first boot under systemd. It returns cloud-init's status, its output log, and report's output, run on the
// host afterwards.
func bootRealCloudInit(ctx context.Context, t *testing.T, img osimage.Image, data []byte, report string) (status, log, out string) {
	t.Helper()
	h, err := hosts.StartCloudImage(ctx, labnet.NewForTest(t), realHostname, img, hosts.CloudImageOptions{
		UserData: data, InstanceID: "iid-" + realHostname, Files: []osimage.File{realKubeadmFile}})
	if err != nil {
		t.Fatal(err)
	}
	// status --wait exits non-zero when cloud-init ended in an error; the status itself says which.
	status, _ = h.RunInMachine(ctx, "cloud-init status --wait >/dev/null; cloud-init status --long")
	if log, err = h.RunInMachine(ctx, "cat /var/log/cloud-init-output.log"); err != nil {
		t.Fatal(err)
	}
	if out, err = h.RunInMachine(ctx, report); err != nil {
		t.Fatalf("the report failed on the booted host: %v", err)
	}
	return status, log, out
}

// The bytes CABPK renders for a worker give the same result under the image's real cloud-init (22.4, on a
// booted host: systemd as PID 1 runs its units on the first boot) and under Parse + Script (in a fresh
// copy of the same image's root filesystem): the same commands in the same order, and the same files with
// the same content, mode and owner, with the same kubeadm stand-in.
func TestCABPKWorkerMatchesRealCloudInit(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	data := realCABPKWorker(t)
	g.Expect(string(data)).To(HavePrefix("## template: jinja\n#cloud-config\n"))

	start := time.Now()
	status, log, report := bootRealCloudInit(ctx, t, img, data, "grep -A3 '\"errors\"' /run/cloud-init/result.json | tr -d ' \\n'; echo\n"+realReport)
	t.Logf("a host booted and its real cloud-init ran in %v", time.Since(start).Round(time.Millisecond))
	g.Expect(status).To(ContainSubstring("status: done"), "cloud-init did not finish cleanly:\n%s\n%s", status, log)
	g.Expect(warnings([]byte(log))).To(BeEmpty(), "cloud-init warned (a module, or the data's schema):\n%s", log)
	errs, realOut, _ := strings.Cut(report, "\n")
	g.Expect(errs).To(HavePrefix(`"errors":[]`), "cloud-init recorded errors in result.json:\n%s", log)

	start = time.Now()
	ours, err := runOurs(ctx, img, data, realReport)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("Parse + Script ran in %v", time.Since(start).Round(time.Millisecond))
	g.Expect(ours.Status).To(BeZero(), "the script failed:\n%s", ours.Output)

	realOrder, realFiles := splitReport(t, realOut)
	ourOrder, ourFiles := splitReport(t, string(ours.Report))
	g.Expect(realOrder).To(ContainElements("bootcmd-1", "bootcmd-before-files", "kubeadm-sees-rendered-join-config", "post-sees-sentinel"),
		"the data's own commands ran under cloud-init")
	if d := lineDiff(realOrder, ourOrder); d != "" {
		t.Errorf("the commands ran in another order than under cloud-init (- cloud-init, + Parse + Script):\n%s", d)
	}
	if d := lineDiff(realFiles, ourFiles); d != "" {
		t.Errorf("the files differ from cloud-init's (- cloud-init, + Parse + Script; path, type, mode, owner, content):\n%s", d)
	}
}

// warnings returns cloud-init's warning lines, except the two that say the image has no OpenSSH: the ssh
// module's about host keys (they cannot be turned off in a schema-valid way: ssh_genkeytypes must not be
// empty) and, on a booted host, where systemd answers that ssh.service does not exist, set_passwords'.
func warnings(output []byte) []string {
	var w []string
	for _, line := range strings.Split(string(output), "\n") {
		if strings.Contains(line, "[WARNING]") && !strings.Contains(line, "Failed generating key type") &&
			!strings.Contains(line, "SSH service 'ssh' is not installed") {
			w = append(w, line)
		}
	}
	return w
}

// splitReport returns a copy's order log and its file manifest, each file's content in Go's quoting.
func splitReport(t *testing.T, report string) (order, files []string) {
	t.Helper()
	o, f, ok := strings.Cut(strings.TrimPrefix(report, "== order\n"), "== files\n")
	if !ok {
		t.Fatalf("the report has no file manifest:\n%s", report)
	}
	for _, line := range strings.Split(strings.TrimSuffix(f, "\n"), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 5 && fields[1] == "file" {
			content, err := base64.StdEncoding.DecodeString(fields[4])
			if err != nil {
				t.Fatalf("the manifest line %q does not end with base64: %v", line, err)
			}
			fields[4] = strconv.Quote(string(content))
		}
		files = append(files, strings.Join(fields, " "))
	}
	return strings.Split(strings.TrimSuffix(o, "\n"), "\n"), files
}

// lineDiff returns the lines only in a (-) and only in b (+), in order, with the common lines between
// them (a longest common subsequence); "" when a and b are equal.
func lineDiff(a, b []string) string {
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var d strings.Builder
	same := true
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			fmt.Fprintf(&d, "  %s\n", a[i])
			i, j = i+1, j+1
		case j == len(b) || (i < len(a) && lcs[i+1][j] >= lcs[i][j+1]):
			fmt.Fprintf(&d, "- %s\n", a[i])
			i, same = i+1, false
		default:
			fmt.Fprintf(&d, "+ %s\n", b[j])
			j, same = j+1, false
		}
	}
	if same {
		return ""
	}
	return d.String()
}

// A `{#` in CABPK's data (always a jinja template), here `${#…}` in a preKubeadmCommand, makes real
// cloud-init drop the whole user data: the template does not render (an unclosed jinja comment), it logs a
// warning and runs nothing of the data — no bootcmd, no file, no kubeadm — while every stage exits 0 and
// result.json records no error. Parse refuses such data by name instead of running what cloud-init never
// would (TestParseRefusesJinjaComment).
func TestJinjaCommentIsRefusedAsRealCloudInitIgnoresTheData(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	data, err := cabpk.NewNode(&cabpk.NodeInput{
		BaseUserData: cabpk.BaseUserData{
			BootCommands:       []string{"echo bootcmd-1 >> " + realOrderLog},
			PreKubeadmCommands: []string{"v=abc; echo \"pre-len ${#v}\" >> " + realOrderLog},
			AdditionalFiles:    []bootstrapv1.File{{Path: "/etc/yci/plain.conf", Content: "x\n"}},
		},
		JoinConfiguration: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration:\n  name: {{ ds.meta_data.local_hostname }}\n",
	})
	g.Expect(err).NotTo(HaveOccurred())

	ci, err := runRealCloudInit(ctx, img, data, "grep -A3 '\"errors\"' /run/cloud-init/result.json | tr -d ' \\n'; echo\n"+
		"ls "+realOrderLog+" /etc/yci /run/kubeadm 2>&1 || true; grep -c 'TemplateSyntaxError: Missing end of comment tag' /var/log/cloud-init.log")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ci.Status).To(BeZero(), "every stage exits 0:\n%s", ci.Output)
	g.Expect(warnings(ci.Output)).To(ConsistOf(ContainSubstring("Failed calling handler JinjaTemplatePartHandler")))
	g.Expect(strings.Split(strings.TrimSpace(string(ci.Report)), "\n")).To(Equal([]string{
		`"errors":[]}}`,
		"ls: cannot access '" + realOrderLog + "': No such file or directory",
		"ls: cannot access '/etc/yci': No such file or directory",
		"ls: cannot access '/run/kubeadm': No such file or directory",
		"1",
	}), "nothing of the data ran")

	_, err = cloudinit.Parse(data, cloudinit.Options{Hostname: realHostname})
	var u *cloudinit.UnsupportedError
	g.Expect(errors.As(err, &u)).To(BeTrue(), "%v", err)
	g.Expect(u.Items).To(ConsistOf(HavePrefix("jinja comment {#")))
}

// A module that fails is where this executor deliberately parts from cloud-init. cloud-init logs the
// failure, skips the rest of that module and runs every other module — runcmd too. A failed bootcmd then
// still joins the node (the stage's exit status and result.json are all that tell); a write_files entry
// that fails leaves the entries after it unwritten, CABPK's join configuration among them (CABPK puts it
// last), so kubeadm fails and the post commands run anyway. Here the bootstrap stops at the failing module
// with its exit status (96 bootcmd, 97 write_files) and nothing after it runs: a node whose boot commands
// or files failed is not the node the data describes, and the Machine says so (BootstrapFailed) instead
// of joining it or waiting for a sentinel that cannot come.
func TestModuleFailureStopsHereWhereRealCloudInitCarriesOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := osimage.Cached(ctx, osimage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The order log, the files CABPK's data wrote, and /run/cluster-api (the sentinel).
	const report = "cat " + realOrderLog + " 2>/dev/null; for d in /etc/yci /run/cluster-api; do ls -A $d 2>/dev/null; done; true"
	// Every stage runs, whatever the one before returned, as systemd runs them.
	var stages strings.Builder
	for _, s := range realStages {
		fmt.Fprintf(&stages, "cloud-init %s; echo \"status-of-%s: $?\" >> %s\n", s, strings.ReplaceAll(s, " ", "_"), realOrderLog)
	}
	for name, tc := range map[string]struct {
		bootCommands []string
		owner        string
		realWarnings []string
		real         []string
		oursStatus   int
		ours         []string
	}{
		"bootcmd": {
			bootCommands: []string{"echo bootcmd-1 >> " + realOrderLog, "false"},
			realWarnings: []string{"Failed to run bootcmd module", "Running module bootcmd"},
			real: []string{
				"status-of-init_--local:", "0", "bootcmd-1", "status-of-init:", "1", "status-of-modules_--mode=config:", "0",
				"pre-1", "kubeadm", "join", "--config", "/run/kubeadm/kubeadm-join-config.yaml", "kubeadm-sees-rendered-join-config", "post-1",
				"status-of-modules_--mode=final:", "0",
				"1-before", "2-owned", "3-after", "bootstrap-success.complete", "placeholder",
			},
			oursStatus: cloudinit.ExitBootCmd,
			ours:       []string{"bootcmd-1"},
		},
		"write_files": {
			bootCommands: []string{"echo bootcmd-1 >> " + realOrderLog},
			owner:        "yci-nosuchuser",
			realWarnings: []string{"Running module write-files"},
			real: []string{
				"status-of-init_--local:", "0", "bootcmd-1", "status-of-init:", "1", "status-of-modules_--mode=config:", "0",
				"pre-1", "kubeadm", "join", "--config", "/run/kubeadm/kubeadm-join-config.yaml", "kubeadm-join-config-not-rendered", "post-1",
				"status-of-modules_--mode=final:", "0",
				"1-before", "2-owned", // written, then its chown failed; nothing after it, nor /run/cluster-api
			},
			oursStatus: cloudinit.ExitWriteFiles,
			// The failed entry leaves nothing: not its file, nor the temporary file it was written to.
			ours: []string{"bootcmd-1", "1-before"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			owner := "daemon"
			if tc.owner != "" {
				owner = tc.owner
			}
			data, err := cabpk.NewNode(&cabpk.NodeInput{
				BaseUserData: cabpk.BaseUserData{
					BootCommands:        tc.bootCommands,
					PreKubeadmCommands:  []string{"echo pre-1 >> " + realOrderLog},
					PostKubeadmCommands: []string{"echo post-1 >> " + realOrderLog},
					AdditionalFiles: []bootstrapv1.File{
						{Path: "/etc/yci/1-before", Content: "x\n"},
						{Path: "/etc/yci/2-owned", Owner: owner, Permissions: "0600", Content: "x\n"},
						{Path: "/etc/yci/3-after", Content: "x\n"},
					},
				},
				JoinConfiguration: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration:\n  name: {{ ds.meta_data.local_hostname }}\n",
			})
			g.Expect(err).NotTo(HaveOccurred())

			ci, err := img.RunInCopy(ctx, osimage.CopyRun{Files: realSeed(data), Command: stages.String(), Report: report})
			g.Expect(err).NotTo(HaveOccurred())
			var want []any
			for _, w := range tc.realWarnings {
				want = append(want, ContainSubstring(w))
			}
			g.Expect(warnings(ci.Output)).To(ConsistOf(want...), "cloud-init reports the module as failed:\n%s", ci.Output)
			g.Expect(strings.Fields(string(ci.Report))).To(Equal(tc.real), "cloud-init carried on after the failure")

			ours, err := runOurs(ctx, img, data, report)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ours.Status).To(Equal(tc.oursStatus), "%s", ours.Output)
			g.Expect(strings.Fields(string(ours.Report))).To(Equal(tc.ours), "nothing after the failed module ran")
		})
	}
}
