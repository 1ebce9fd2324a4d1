package cloudinit_test

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/cloudinit"
)

// A `{#` in a jinja template, as `${#var}` in a shell line or a file, is refused by name: real cloud-init
// cannot render such a template and ignores the whole user data (TestJinjaCommentIsRefusedAsRealCloudInitIgnoresTheData),
// so running it would bootstrap a node cloud-init never would. Without the jinja header it is plain text.
func TestParseRefusesJinjaComment(t *testing.T) {
	for name, tc := range map[string]struct {
		data    string
		refused bool
	}{
		"in runcmd":          {"## template: jinja\n#cloud-config\nruncmd:\n- 'echo ${#PATH}'\n", true},
		"in a file":          {"## template: jinja\n#cloud-config\nwrite_files:\n- path: /etc/x\n  content: 'n=${#list[@]}'\n", true},
		"closed comment":     {"## template: jinja\n#cloud-config\nruncmd:\n- 'echo hi {# a note #}'\n", true},
		"without the header": {"#cloud-config\nruncmd:\n- 'echo ${#PATH}'\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := cloudinit.Parse([]byte(tc.data), cloudinit.Options{Hostname: "h"})
			if !tc.refused {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var u *cloudinit.UnsupportedError
			g.Expect(errors.As(err, &u)).To(BeTrue(), "%v", err)
			g.Expect(u.Items).To(ConsistOf(HavePrefix("jinja comment {#")))
		})
	}
}
