package cloudinit

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/yonder-dev/yonder/pkg/shellwrite"
)

// User is one users entry, as cloud-init 22.4's users-groups module reads it.
type User struct {
	Name         string
	Gecos        string
	Groups       []string
	PrimaryGroup string
	HomeDir      string
	Shell        string
	Inactive     string
	ExpireDate   string
	UID          string
	System       bool
	NoCreateHome bool
	NoUserGroup  bool
	// Passwd is a crypt(3) hash set when the user is created (cloud-init's passwd); HashedPasswd is set
	// on every run (hashed_passwd).
	Passwd       string
	HashedPasswd string
	// LockPasswd defaults to true, as in cloud-init: password logins are disabled.
	LockPasswd bool
	// Sudo holds sudoers rules written for the user ("ALL=(ALL) NOPASSWD:ALL").
	Sudo              []string
	SSHAuthorizedKeys []string
}

// SudoersFile is the file cloud-init writes users' sudo rules to.
const SudoersFile = "/etc/sudoers.d/90-cloud-init-users"

var (
	validName = regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,31}$`)
	validDate = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
	// A crypt(3) hash ($id$[params$]salt$hash), or a locked / disabled marker.
	validHash = regexp.MustCompile(`^(!|\*|!\*|!?\$[0-9a-z]+\$[./A-Za-z0-9$=,+-]+)$`)
)

// parseUsers reads the users key: a list of names (strings) and user mappings. It returns what the
// data uses that is not run (the distro's default user, keys of a user this executor does not apply).
func (c *Config) parseUsers(v any) ([]string, error) {
	var items []any
	switch u := v.(type) {
	case nil:
		return nil, nil
	case string:
		// cloud-init's shorthand: "default, alice".
		for _, n := range strings.Split(u, ",") {
			items = append(items, strings.TrimSpace(n))
		}
	case []any:
		items = u
	default:
		return []string{"users as a mapping (use a list)"}, nil
	}
	var unsupported []string
	for i, it := range items {
		switch e := it.(type) {
		case string:
			if e == "default" {
				// A claimed host is not an image: there is no distro default user to create.
				unsupported = append(unsupported, fmt.Sprintf("users[%d]: default (a claimed host has no distro default user; name the user)", i))
				continue
			}
			u, more, err := parseUser(i, map[string]any{"name": e})
			if err != nil {
				return nil, err
			}
			unsupported = append(unsupported, more...)
			c.Users = append(c.Users, u)
		case map[string]any:
			u, more, err := parseUser(i, e)
			if err != nil {
				return nil, err
			}
			unsupported = append(unsupported, more...)
			c.Users = append(c.Users, u)
		default:
			return nil, fmt.Errorf("failed to parse users[%d]: neither a name nor a mapping", i)
		}
	}
	return unsupported, nil
}

// parseUser reads one user mapping. Errors never quote a password hash.
func parseUser(i int, m map[string]any) (User, []string, error) {
	u := User{LockPasswd: true}
	var unsupported []string
	bad := func(key, why string) error { return fmt.Errorf("failed to parse users[%d].%s: %s", i, key, why) }
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		var err error
		switch k {
		case "name":
			u.Name, err = scalar(v)
			if err == nil && !validName.MatchString(u.Name) {
				err = fmt.Errorf("%q is not a user name", u.Name)
			}
		case "gecos":
			u.Gecos, err = scalar(v)
			if err == nil && strings.ContainsAny(u.Gecos, ":\n\x00") {
				err = fmt.Errorf("%q contains ':', a newline or a NUL byte", u.Gecos)
			}
		case "groups":
			u.Groups, err = nameList(v)
		case "primary_group":
			u.PrimaryGroup, err = scalar(v)
			if err == nil && !validName.MatchString(u.PrimaryGroup) {
				err = fmt.Errorf("%q is not a group name", u.PrimaryGroup)
			}
		case "homedir", "shell":
			var p string
			if p, err = scalar(v); err == nil && (!path.IsAbs(p) || strings.ContainsAny(p, ":\n\x00")) {
				err = fmt.Errorf("%q is not an absolute path without ':', newline or NUL", p)
			}
			if k == "homedir" {
				u.HomeDir = p
			} else {
				u.Shell = p
			}
		case "inactive", "uid":
			if b, isBool := v.(bool); isBool && k == "inactive" {
				// CABPK writes its boolean User.inactive as is; cloud-init's useradd passes only a
				// number of days and drops a boolean. false asks for nothing; true cannot be honoured.
				if b {
					unsupported = append(unsupported, fmt.Sprintf("users[%d].inactive: true (give the days after password expiry instead)", i))
				}
				continue
			}
			var n string
			if n, err = scalar(v); err == nil {
				if _, perr := strconv.ParseInt(n, 10, 32); perr != nil {
					err = fmt.Errorf("%q is not a number", n)
				}
			}
			if k == "inactive" {
				u.Inactive = n
			} else {
				u.UID = n
			}
		case "expiredate":
			if u.ExpireDate, err = scalar(v); err == nil && !validDate.MatchString(u.ExpireDate) {
				err = fmt.Errorf("%q is not a YYYY-MM-DD date", u.ExpireDate)
			}
		case "system", "no_create_home", "no_user_group", "lock_passwd":
			b, ok := v.(bool)
			if !ok {
				err = fmt.Errorf("%v is not true or false", v)
			}
			switch k {
			case "system":
				u.System = b
			case "no_create_home":
				u.NoCreateHome = b
			case "no_user_group":
				u.NoUserGroup = b
			default:
				u.LockPasswd = b
			}
		case "passwd", "hashed_passwd":
			var h string
			if h, err = scalar(v); err == nil && !validHash.MatchString(h) {
				err = fmt.Errorf("is not a crypt(3) hash (plain text passwords are not accepted)")
			}
			if k == "passwd" {
				u.Passwd = h
			} else {
				u.HashedPasswd = h
			}
		case "sudo":
			u.Sudo, err = sudoRules(v)
		case "ssh_authorized_keys":
			u.SSHAuthorizedKeys, err = lines(v)
		default:
			unsupported = append(unsupported, fmt.Sprintf("users[%d].%s", i, k))
		}
		if err != nil {
			return User{}, nil, bad(k, err.Error())
		}
	}
	if u.Name == "" {
		return User{}, nil, bad("name", "missing")
	}
	return u, unsupported, nil
}

// scalar reads a YAML scalar as the string cloud-init would pass on.
func scalar(v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case bool, float64, int64, int:
		return fmt.Sprint(s), nil
	default:
		return "", fmt.Errorf("%v is not a scalar", v)
	}
}

// nameList reads groups: "a, b" or a list, every entry a valid group name.
func nameList(v any) ([]string, error) {
	var names []string
	switch g := v.(type) {
	case string:
		names = strings.Split(g, ",")
	case []any:
		for _, e := range g {
			s, err := scalar(e)
			if err != nil {
				return nil, err
			}
			names = append(names, s)
		}
	default:
		return nil, fmt.Errorf("%v is neither a comma-separated string nor a list", v)
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		n = strings.TrimSpace(n)
		if !validName.MatchString(n) {
			return nil, fmt.Errorf("%q is not a group name", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// sudoRules reads sudo: a rule, a list of rules, or false / null for none.
func sudoRules(v any) ([]string, error) {
	switch s := v.(type) {
	case nil:
		return nil, nil
	case bool:
		if s {
			return nil, fmt.Errorf("true is not a sudoers rule")
		}
		return nil, nil
	default:
		return lines(v)
	}
}

// lines reads a string or a list of strings, each one line (a newline would start another sudoers rule
// or authorized key than the one written).
func lines(v any) ([]string, error) {
	var out []string
	switch s := v.(type) {
	case string:
		out = []string{s}
	case []any:
		for _, e := range s {
			str, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%v is not a string", e)
			}
			out = append(out, str)
		}
	default:
		return nil, fmt.Errorf("%v is neither a string nor a list", v)
	}
	for _, l := range out {
		if strings.ContainsAny(l, "\n\r\x00") {
			return nil, fmt.Errorf("%q contains a newline or a NUL byte", l)
		}
	}
	return out, nil
}

// script renders what cloud-init's create_user does: a user that does not exist is created with
// useradd (its groups first), with passwd set through chpasswd -e on stdin (printf is a shell builtin,
// so the hash is in no process's arguments); an existing user keeps its attributes, as in cloud-init.
// Then, for new and existing users alike: hashed_passwd, lock_passwd, sudo rules and authorized keys,
// each only added when missing, so a re-run changes nothing.
func (u User) script(b *strings.Builder) {
	q := shellwrite.Quote
	name := q(u.Name)
	fmt.Fprintf(b, "if ! getent passwd %s >/dev/null; then\n", name)
	groups := append([]string{}, u.Groups...)
	if u.PrimaryGroup != "" {
		groups = append(groups, u.PrimaryGroup)
	}
	for _, g := range groups {
		fmt.Fprintf(b, "getent group %[1]s >/dev/null || groupadd %[1]s\n", q(g))
	}
	args := []string{"useradd"}
	for _, o := range []struct{ flag, val string }{
		{"--comment", u.Gecos}, {"--home-dir", u.HomeDir}, {"--gid", u.PrimaryGroup}, {"--uid", u.UID},
		{"--groups", strings.Join(u.Groups, ",")}, {"--shell", u.Shell}, {"--expiredate", u.ExpireDate}, {"--inactive", u.Inactive},
	} {
		if o.val != "" {
			args = append(args, o.flag, q(o.val))
		}
	}
	if u.System {
		args = append(args, "--system")
	}
	if u.NoUserGroup {
		args = append(args, "--no-user-group")
	}
	if u.NoCreateHome || u.System {
		args = append(args, "-M")
	} else {
		args = append(args, "-m")
	}
	b.WriteString(strings.Join(append(args, name), " ") + "\n")
	if u.Passwd != "" {
		fmt.Fprintf(b, "printf '%%s\\n' %s | chpasswd -e\n", q(u.Name+":"+u.Passwd))
	}
	b.WriteString("fi\n")
	if u.HashedPasswd != "" {
		fmt.Fprintf(b, "printf '%%s\\n' %s | chpasswd -e\n", q(u.Name+":"+u.HashedPasswd))
	}
	if u.LockPasswd {
		fmt.Fprintf(b, "usermod --lock %s\n", name)
	}
	u.sudoScript(b)
	u.keysScript(b)
}

// sudoScript appends the user's rules to SudoersFile (0440) when missing, and makes /etc/sudoers read
// /etc/sudoers.d as cloud-init does.
func (u User) sudoScript(b *strings.Builder) {
	if len(u.Sudo) == 0 {
		return
	}
	q := shellwrite.Quote
	f := q(SudoersFile)
	b.WriteString("mkdir -p /etc/sudoers.d && chmod 0750 /etc/sudoers.d\n")
	b.WriteString("if [ -f /etc/sudoers ] && ! grep -Eq '^[#@]includedir[[:space:]]+/etc/sudoers.d/?[[:space:]]*$' /etc/sudoers; then printf '\\n#includedir /etc/sudoers.d\\n' >> /etc/sudoers; fi\n")
	fmt.Fprintf(b, "(umask 0337 && : >> %s)\nchmod 0440 %s\n", f, f)
	header := "# User rules for " + u.Name
	fmt.Fprintf(b, "grep -qxF -e %[1]s %[2]s || printf '\\n%%s\\n' %[1]s >> %[2]s\n", q(header), f)
	for _, r := range u.Sudo {
		l := q(u.Name + " " + r)
		fmt.Fprintf(b, "grep -qxF -e %[1]s %[2]s || printf '%%s\\n' %[1]s >> %[2]s\n", l, f)
	}
}

// keysScript adds the user's authorized keys to ~/.ssh/authorized_keys (0600 in a 0700 directory, both
// the user's) when missing.
func (u User) keysScript(b *strings.Builder) {
	if len(u.SSHAuthorizedKeys) == 0 {
		return
	}
	name := shellwrite.Quote(u.Name)
	fmt.Fprintf(b, "h=$(getent passwd %s | cut -d: -f6)\n[ -n \"$h\" ]\n", name)
	fmt.Fprintf(b, "mkdir -p \"$h/.ssh\"\nchmod 0700 \"$h/.ssh\"\nchown %s: \"$h/.ssh\"\n", name)
	b.WriteString("k=\"$h/.ssh/authorized_keys\"\n(umask 077 && : >> \"$k\")\n")
	for _, key := range u.SSHAuthorizedKeys {
		fmt.Fprintf(b, "grep -qxF -e %[1]s \"$k\" || printf '%%s\\n' %[1]s >> \"$k\"\n", shellwrite.Quote(key))
	}
	fmt.Fprintf(b, "chmod 0600 \"$k\"\nchown %s: \"$k\"\n", name)
}
