package inventory

import (
	"errors"
	"fmt"
	"strings"
)

// ReasonInvalidBootParameter is the condition reason (and HTTP refusal reason) of a value that cannot go
// into an iPXE script: the image URL, its checksum, a kernel or initrd name, a kernel argument.
const ReasonInvalidBootParameter = "InvalidBootParameter"

// ErrInvalidBootParameter is wrapped by every CheckBootValue error.
var ErrInvalidBootParameter = errors.New(ReasonInvalidBootParameter)

// CheckBootValue refuses a value that would change the iPXE script it is written into rather than be
// one word of it: iPXE reads a script line by line, splits a command on blanks, runs `cmd || other` and
// `cmd && other`, and expands ${setting} anywhere. So a value may hold no control character (a newline
// starts a new command), no blank (a new argument), no quote or backslash, and no "${", "||" or "&&".
// field names the value in the error (e.g. "spec.image.url").
func CheckBootValue(field, v string) error {
	for i, r := range v {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return fmt.Errorf("%w: %s holds control character %q at byte %d: it would end the iPXE command", ErrInvalidBootParameter, field, r, i)
		case r == ' ' || r == '\u00a0':
			return fmt.Errorf("%w: %s holds a blank at byte %d: it would add an argument to the iPXE command (percent-encode it as %%20 in a URL)", ErrInvalidBootParameter, field, i)
		case r == '"' || r == '\'' || r == '\\':
			return fmt.Errorf("%w: %s holds %q at byte %d: quotes and backslashes are not allowed in boot parameters", ErrInvalidBootParameter, field, r, i)
		}
	}
	for _, bad := range []string{"${", "||", "&&"} {
		if strings.Contains(v, bad) {
			return fmt.Errorf("%w: %s holds %q, which iPXE interprets (setting expansion or command chaining)", ErrInvalidBootParameter, field, bad)
		}
	}
	return nil
}

// CheckCmdline checks every blank-separated word of a kernel command line with CheckBootValue (blanks
// between words are the separators, so only single spaces are accepted between them).
func CheckCmdline(field, cmdline string) error {
	for i, w := range strings.Split(cmdline, " ") {
		if err := CheckBootValue(fmt.Sprintf("%s word %d", field, i+1), w); err != nil {
			return err
		}
	}
	return nil
}

// Check validates everything of the boot configuration that goes into a script.
func (b BootConfig) Check() error {
	if err := CheckBootValue("kernel", b.Kernel); err != nil {
		return err
	}
	if err := CheckBootValue("initrd", b.Initrd); err != nil {
		return err
	}
	if err := CheckBootValue("live ISO", b.LiveISO); err != nil {
		return err
	}
	return CheckCmdline("kernel command line", strings.Trim(b.Cmdline, " "))
}
