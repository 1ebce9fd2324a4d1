package testbins_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// commandUse is one external command the code runs, and where.
type commandUse struct {
	name  string
	where string
}

// goScan finds the external commands Go code runs on this machine: the literal argv[0] of exec.Command,
// exec.CommandContext and exec.LookPath (through nsenter, unshare, env, timeout and `ip netns exec`), the
// commands of literal `sh -c`/`bash -c` scripts, and of literal scripts that tests run on their netns hosts
// (`host.Run(ctx, "…")`, `host.Output(ctx, "…")`, which share this machine's programs). A name that is not a
// literal (a variable, a built binary's path) is not a command of this machine's and is left out.
type goScan struct {
	fset    *token.FileSet
	consts  map[string]string // string constants and literal-initialised variables of the file's package
	uses    []commandUse
	shells  []shellScript // literal scripts run with sh -c / bash -c
	relPath string
	// wrappers are the tree's own functions that run one of their parameters as a command (topo.In(ns,
	// name, args...), proc.Run(ctx, name, args...)): function name → index of that parameter.
	wrappers wrapperSet
	dir      string
}

// shellScript is a literal script run by `sh -c` or `bash -c`, with the interpreter's flags.
type shellScript struct {
	Shell, Flags, Text, Where string
}

// argvWrappers run their first non-option argument as a command.
var argvWrappers = map[string]bool{"nsenter": true, "unshare": true, "env": true, "timeout": true, "setsid": true, "chroot": true, "xargs": true, "stdbuf": true, "nice": true}

var shells = map[string]bool{"sh": true, "bash": true, "/bin/sh": true, "/bin/bash": true, "/usr/bin/env": false}

func (s *goScan) where(n ast.Node) string {
	p := s.fset.Position(n.Pos())
	return s.relPath + ":" + strconv.Itoa(p.Line)
}

// literal evaluates a string expression made of literals and known constants; other operands become "X".
func (s *goScan) literal(e ast.Expr) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return "", false
		}
		u, err := strconv.Unquote(v.Value)
		return u, err == nil
	case *ast.Ident:
		c, ok := s.consts[v.Name]
		return c, ok
	case *ast.BinaryExpr:
		if v.Op != token.ADD {
			return "", false
		}
		l, lok := s.literal(v.X)
		r, rok := s.literal(v.Y)
		if !lok && !rok {
			return "", false
		}
		if !lok {
			l = "X"
		}
		if !rok {
			r = "X"
		}
		return l + r, true
	case *ast.ParenExpr:
		return s.literal(v.X)
	}
	return "", false
}

func (s *goScan) argv(args []ast.Expr, where string) {
	if len(args) == 0 {
		return
	}
	name, ok := s.literal(args[0])
	if !ok || strings.Contains(name, "X") && !strings.HasPrefix(name, "/") {
		return
	}
	if strings.HasPrefix(name, "/usr/bin/env") {
		s.argv(args[1:], where)
		return
	}
	if strings.ContainsAny(name, " \n;|&") {
		// a whole command line given to a runner that takes scripts (SSH hosts' Run)
		for _, c := range shellCommands(name) {
			s.uses = append(s.uses, commandUse{c, where})
		}
		return
	}
	s.uses = append(s.uses, commandUse{name, where})
	switch {
	case shells[name]:
		var flags []string
		for i := 1; i < len(args); i++ {
			a, ok := s.literal(args[i])
			if !ok {
				return
			}
			if a == "-c" {
				if i+1 < len(args) {
					if text, ok := s.literal(args[i+1]); ok {
						s.shells = append(s.shells, shellScript{Shell: name, Flags: strings.Join(flags, " "), Text: text, Where: where})
						for _, c := range shellCommands(text) {
							s.uses = append(s.uses, commandUse{c, where})
						}
					}
				}
				return
			}
			flags = append(flags, a)
		}
	case argvWrappers[name]:
		for i := 1; i < len(args); i++ {
			a, ok := s.literal(args[i])
			if !ok {
				return // the wrapped command is not a literal (a built binary's path)
			}
			if strings.HasPrefix(a, "-") || strings.Contains(a, "=") || isNumber(a) {
				continue
			}
			s.argv(args[i:], where)
			return
		}
	case name == "ip" && len(args) > 4:
		if a, _ := s.literal(args[1]); a == "netns" {
			if b, _ := s.literal(args[2]); b == "exec" {
				s.argv(args[4:], where)
			}
		}
	}
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(strings.TrimRight(s, "smh"), 64)
	return err == nil
}

func (s *goScan) visit(n ast.Node) bool {
	call, ok := n.(*ast.CallExpr)
	if !ok {
		return true
	}
	if fn, ok := call.Fun.(*ast.Ident); ok && fn.Name == "append" && len(call.Args) > 1 {
		// argv built with append: args = append(args, "--", "sh", "-c", script, …)
		for i := 1; i < len(call.Args); i++ {
			if a, ok := s.literal(call.Args[i]); ok && (shells[a] || argvWrappers[a]) {
				s.argv(call.Args[i:], s.where(call))
				break
			}
		}
		return true
	}
	if i, ok := s.wrappers.lookup(s.dir, call); ok && i < len(call.Args) {
		s.argv(call.Args[i:], s.where(call))
		return true
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return true
	}
	pkg, _ := sel.X.(*ast.Ident)
	switch {
	case pkg != nil && pkg.Name == "exec" && (sel.Sel.Name == "Command" || sel.Sel.Name == "LookPath"):
		s.argv(call.Args, s.where(call))
	case pkg != nil && pkg.Name == "exec" && sel.Sel.Name == "CommandContext" && len(call.Args) > 1:
		s.argv(call.Args[1:], s.where(call))
	case (sel.Sel.Name == "Run" || sel.Sel.Name == "Output") && len(call.Args) == 2:
		if ctx, ok := call.Args[0].(*ast.Ident); ok && ctx.Name == "ctx" {
			if text, ok := s.literal(call.Args[1]); ok {
				for _, c := range shellCommands(text) {
					s.uses = append(s.uses, commandUse{c, s.where(call)})
				}
			}
		}
	}
	return true
}

// scanGoTree scans every non-generated Go file under root.
func scanGoTree(root string) ([]commandUse, []shellScript, error) {
	var uses []commandUse
	var scripts []shellScript
	pkgs := map[string][]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "_lab" || n == "out" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasPrefix(d.Name(), "zz_generated") || strings.HasSuffix(path, "_bpfel.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	wrappers := findWrappers(pkgs)
	dirs := make([]string, 0, len(pkgs))
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		consts := map[string]string{}
		s := &goScan{fset: fset, consts: consts, wrappers: wrappers, dir: d}
		ambiguous := map[string]bool{}
		for _, f := range pkgs[d] {
			collectLiterals(s, f, ambiguous)
		}
		for name := range ambiguous {
			delete(consts, name)
		}
		for _, f := range pkgs[d] {
			rel, _ := filepath.Rel(root, fset.Position(f.Pos()).Filename)
			s.relPath = rel
			ast.Inspect(f, s.visit)
		}
		uses = append(uses, s.uses...)
		scripts = append(scripts, s.shells...)
	}
	return uses, scripts, nil
}

// calleeName is the name of the function a call calls (f, pkg.f or x.f).
func calleeName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// wrapperSet holds the tree's functions that run one of their parameters as a command name: per package for
// plain calls (run(…) means this package's run), and by name alone for pkg.F(…) and x.M(…) calls, where a
// name with two shapes in the tree is left out.
type wrapperSet struct {
	local  map[string]map[string]int // package dir → function name → parameter index
	global map[string]int
}

func (w wrapperSet) lookup(dir string, call *ast.CallExpr) (int, bool) {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		i, ok := w.local[dir][f.Name]
		return i, ok
	case *ast.SelectorExpr:
		i, ok := w.global[f.Sel.Name]
		return i, ok
	}
	return 0, false
}

// findWrappers finds the functions that pass one of their parameters to exec.Command (directly, as the
// command after nsenter's options, or through another such function) as the command name.
func findWrappers(pkgs map[string][]*ast.File) wrapperSet {
	w := wrapperSet{local: map[string]map[string]int{}, global: map[string]int{}}
	for pass := 0; pass < 3; pass++ {
		global := map[string]int{}
		conflicting := map[string]bool{}
		for dir, files := range pkgs {
			if w.local[dir] == nil {
				w.local[dir] = map[string]int{}
			}
			for _, f := range files {
				for _, decl := range f.Decls {
					fd, ok := decl.(*ast.FuncDecl)
					if !ok || fd.Body == nil {
						continue
					}
					if p, ok := runsParameter(w, dir, fd); ok {
						w.local[dir][fd.Name.Name] = p
						if old, seen := global[fd.Name.Name]; seen && old != p {
							conflicting[fd.Name.Name] = true
						}
						global[fd.Name.Name] = p
					}
				}
			}
		}
		for n := range conflicting {
			delete(global, n)
		}
		w.global = global
	}
	return w
}

// runsParameter reports which parameter of fd its body runs as a command name.
func runsParameter(w wrapperSet, dir string, fd *ast.FuncDecl) (int, bool) {
	params := map[string]int{}
	i := 0
	for _, p := range fd.Type.Params.List {
		for _, n := range p.Names {
			params[n.Name] = i
			i++
		}
		if len(p.Names) == 0 {
			i++
		}
	}
	param := func(e ast.Expr) (int, bool) {
		id, ok := e.(*ast.Ident)
		if !ok {
			return 0, false
		}
		p, ok := params[id.Name]
		return p, ok
	}
	found, at := false, 0
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || found {
			return !found
		}
		var args []ast.Expr
		switch name := calleeName(call); {
		case name == "Command" || name == "LookPath":
			args = call.Args
		case name == "CommandContext" && len(call.Args) > 1:
			args = call.Args[1:]
		default:
			if i, ok := w.lookup(dir, call); ok && name != fd.Name.Name && i < len(call.Args) {
				args = call.Args[i:]
			}
		}
		if len(args) == 0 {
			return true
		}
		if p, ok := param(args[0]); ok {
			found, at = true, p
			return false
		}
		// exec.Command("nsenter", append([]string{"--net=" + ns, name}, args...)...)
		if lit, ok := args[0].(*ast.BasicLit); ok && len(args) > 1 && argvWrappers[strings.Trim(lit.Value, `"`)] {
			if app, ok := args[1].(*ast.CallExpr); ok && calleeName(app) == "append" && len(app.Args) > 0 {
				if cl, ok := app.Args[0].(*ast.CompositeLit); ok {
					for _, e := range cl.Elts {
						if p, ok := param(e); ok {
							found, at = true, p
							return false
						}
					}
				}
			}
		}
		return true
	})
	return at, found
}

// collectLiterals records the package's string constants and variables initialised with a literal (script
// := `…` included), so that exec.Command("sh", "-c", script) is scanned too. A name that is also a function
// parameter or gets two different values in the package is not resolved: it is not one command.
func collectLiterals(s *goScan, f *ast.File, ambiguous map[string]bool) {
	record := func(name, text string) {
		if old, ok := s.consts[name]; ok && old != text {
			ambiguous[name] = true
		}
		s.consts[name] = text
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch v := n.(type) {
		case *ast.FuncType:
			for _, fl := range []*ast.FieldList{v.Params, v.Results} {
				if fl == nil {
					continue
				}
				for _, p := range fl.List {
					for _, name := range p.Names {
						ambiguous[name.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for i, name := range v.Names {
				if i < len(v.Values) {
					if text, ok := s.literal(v.Values[i]); ok {
						record(name.Name, text)
					}
				}
			}
		case *ast.AssignStmt:
			for i, l := range v.Lhs {
				id, ok := l.(*ast.Ident)
				if !ok {
					continue
				}
				if lit, ok := v.Rhs[min(i, len(v.Rhs)-1)].(*ast.BasicLit); ok && len(v.Lhs) == len(v.Rhs) && v.Tok == token.DEFINE {
					if text, ok := s.literal(lit); ok {
						record(id.Name, text)
						continue
					}
				}
				ambiguous[id.Name] = true
			}
		}
		return true
	})
}

// shellKeywords and builtins are never external commands.
var shellBuiltins = map[string]bool{
	"if": true, "then": true, "else": true, "elif": true, "fi": true, "for": true, "while": true, "until": true, "do": true,
	"done": true, "case": true, "esac": true, "in": true, "function": true, "select": true, "time": true, "coproc": true,
	"echo": true, "printf": true, "cd": true, "exit": true, "return": true, "export": true, "local": true, "set": true,
	"unset": true, "shift": true, "trap": true, "exec": true, "eval": true, "read": true, "wait": true, "true": true,
	"false": true, "test": true, "[": true, "[[": true, "]]": true, ":": true, ".": true, "source": true, "command": true,
	"type": true, "mapfile": true, "readarray": true, "declare": true, "typeset": true, "readonly": true, "let": true,
	"break": true, "continue": true, "pwd": true, "umask": true, "ulimit": true, "kill": true, "hash": true, "getopts": true,
	"builtin": true, "alias": true, "jobs": true, "fg": true, "bg": true, "disown": true, "shopt": true, "pushd": true, "popd": true,
	"{": true, "}": true, "!": true,
}

var commandName = regexp.MustCompile(`^(/[A-Za-z0-9_./+-]+|[A-Za-z_][A-Za-z0-9_.+-]*)$`)

// shellCommands returns the external commands a shell script runs: the first word of every simple command
// (after separators, keywords, assignments and redirections), in $(…), <(…) and backquotes too. Quoted text,
// comments and here-documents are data. Functions the script defines are left out. It is a scanner for
// this repository's scripts, not a shell parser: what it cannot tell, it leaves out.
func shellCommands(script string) []string {
	s := &shellScan{rs: []rune(script), funcs: map[string]bool{}, atCmd: true}
	for ; s.i < len(s.rs); s.i++ {
		s.step()
	}
	s.flush()
	var res []string
	for _, c := range s.out {
		if !s.funcs[c] && !shellBuiltins[c] {
			res = append(res, c)
		}
	}
	return res
}

// shellScan is shellCommands' state while it reads a script, one rune at a time.
type shellScan struct {
	rs       []rune
	i        int // the rune being read
	out      []string
	funcs    map[string]bool
	word     strings.Builder
	atCmd    bool // the next word is in command position
	wrapper  bool // the last command was nsenter, env, timeout…: its options come before its command
	inCase   int  // depth of case … esac: a word closed by ')' there is a pattern
	checking bool // after `command`: `-v X` names a command the script needs
	inWord   bool
	heredocs []string
}

// step reads the rune at s.i and what belongs to it, leaving s.i at the last rune it used.
func (s *shellScan) step() {
	rs, i := s.rs, s.i
	c := rs[i]
	next := rune(0)
	if i+1 < len(rs) {
		next = rs[i+1]
	}
	switch {
	case c == '#' && !s.inWord:
		for s.i < len(rs) && rs[s.i] != '\n' {
			s.i++
		}
		s.i--
	case c == '\'':
		// single-quoted text is data
		s.inWord = true
		s.word.WriteString("'")
		for s.i++; s.i < len(rs) && rs[s.i] != '\''; {
			s.i++
		}
	case c == '"':
		s.doubleQuoted()
	case c == '\\':
		s.inWord = true
		s.i++
	case c == '$' && next == '{':
		s.parameter()
	case c == '(' && s.inWord && strings.HasSuffix(s.word.String(), "="):
		// an array assignment: NAME=(a b c) holds words, not commands
		s.i = matchParen(rs, i)
		s.word.WriteString("X")
	case c == '$' && next == '(':
		s.substitution()
	case c == '<' && next == '(':
		s.flush()
		end := matchParen(rs, i+1)
		s.out = append(s.out, shellCommands(string(rs[i+2:end]))...)
		s.i = end
	case c == '<' && next == '<' && i+2 < len(rs) && rs[i+2] != '<':
		s.heredoc()
	case c == '\n':
		s.newline()
	case c == '(' && next == ')' && s.inWord: // name() { … }: a function, not a command
		s.funcs[s.word.String()] = true
		s.word.Reset()
		s.inWord = false
		s.i++
	case c == ';' || c == '|' || c == '&' || c == '(' || c == '`':
		s.flush()
		if c == '&' && (next == '>' || i > 0 && rs[i-1] == '>') {
			return // &> and >& redirections
		}
		s.atCmd, s.wrapper = true, false
	case c == ')':
		if s.inCase > 0 && s.inWord && s.atCmd { // a case pattern: `--flag)`, `*)`; a command follows
			s.word.Reset()
			s.inWord = false
			return
		}
		s.flush()
	case c == '>' || c == '<':
		s.redirection()
	case c == ' ' || c == '\t':
		s.flush()
	default:
		s.inWord = true
		s.word.WriteRune(c)
	}
}

// doubleQuoted reads "…": data, except the commands of $( … ) inside it.
func (s *shellScan) doubleQuoted() {
	rs := s.rs
	s.inWord = true
	s.word.WriteString("\"")
	for s.i++; s.i < len(rs) && rs[s.i] != '"'; s.i++ {
		if rs[s.i] == '\\' {
			s.i++
			continue
		}
		if rs[s.i] == '$' && s.i+1 < len(rs) && rs[s.i+1] == '(' {
			end := matchParen(rs, s.i+1)
			if s.i+2 < len(rs) && rs[s.i+2] == '(' { // $(( arithmetic ))
				s.i = end
				continue
			}
			saved := s.atCmd
			s.out = append(s.out, shellCommands(string(rs[s.i+2:end]))...)
			s.atCmd = saved
			s.i = end
		}
	}
}

// parameter reads ${var…}, which is part of the word, whatever it holds (${1:?usage: x <y>}).
func (s *shellScan) parameter() {
	rs := s.rs
	depth := 0
	for ; s.i < len(rs); s.i++ {
		if rs[s.i] == '{' {
			depth++
		} else if rs[s.i] == '}' {
			if depth--; depth == 0 {
				break
			}
		}
	}
	s.inWord = true
	s.word.WriteString("X")
}

// substitution reads $( … ), whose commands the script runs, or $(( … )), which is arithmetic.
func (s *shellScan) substitution() {
	rs, i := s.rs, s.i
	end := matchParen(rs, i+1)
	if i+2 < len(rs) && rs[i+2] == '(' { // $(( arithmetic ))
		s.i = end
		s.inWord = true
		return
	}
	s.out = append(s.out, shellCommands(string(rs[i+2:end]))...)
	s.i = end
	s.inWord = true
	s.word.WriteString("X")
}

// heredoc reads <<TAG or <<-TAG; the body is skipped at the end of the line.
func (s *shellScan) heredoc() {
	rs := s.rs
	s.flush()
	j := s.i + 2
	if j < len(rs) && rs[j] == '-' {
		j++
	}
	for j < len(rs) && rs[j] == ' ' {
		j++
	}
	k := j
	for k < len(rs) && !strings.ContainsRune(" \t\n;|&<>", rs[k]) {
		k++
	}
	s.heredocs = append(s.heredocs, strings.Trim(string(rs[j:k]), `'"`))
	s.i = k - 1
}

// newline ends a command, and skips the bodies of the here-documents the line began.
func (s *shellScan) newline() {
	rs := s.rs
	s.flush()
	s.atCmd, s.wrapper = true, false
	for _, tag := range s.heredocs {
		// skip the here-document body up to its terminator line
		for s.i+1 < len(rs) {
			end := strings.IndexRune(string(rs[s.i+1:]), '\n')
			line := ""
			if end < 0 {
				line = string(rs[s.i+1:])
				s.i = len(rs)
			} else {
				line = string(rs[s.i+1 : s.i+1+end])
				s.i += 1 + end
			}
			if strings.TrimSpace(line) == tag {
				break
			}
		}
	}
	s.heredocs = nil
}

// redirection reads a redirection: its target is not a command.
func (s *shellScan) redirection() {
	rs := s.rs
	s.flush()
	saved := s.atCmd
	j := s.i + 1
	for j < len(rs) && (rs[j] == '>' || rs[j] == '<' || rs[j] == '&' || rs[j] == '|') {
		j++
	}
	for j < len(rs) && rs[j] == ' ' {
		j++
	}
	for j < len(rs) && !strings.ContainsRune(" \t\n;|&<>)", rs[j]) {
		j++
	}
	s.i = j - 1
	s.atCmd = saved
}

// flush ends the word being read and decides whether it names a command.
func (s *shellScan) flush() {
	if !s.inWord {
		return
	}
	w := s.word.String()
	s.word.Reset()
	s.inWord = false
	if s.checking {
		if w == "-v" {
			return
		}
		s.checking = false
		if commandName.MatchString(w) {
			s.out = append(s.out, w)
		}
		s.atCmd = false
		return
	}
	if !s.atCmd {
		return
	}
	if s.wrapper && (strings.HasPrefix(w, "-") || strings.Contains(w, "=") || isNumber(w)) {
		return // an option of the wrapper; the command comes next
	}
	s.wrapper = false
	switch {
	case strings.Contains(w, "=") && !strings.HasPrefix(w, "="): // VAR=value cmd
		return
	case shellBuiltins[w]:
		s.builtin(w)
		return
	}
	s.atCmd = false
	if commandName.MatchString(w) {
		s.out = append(s.out, w)
		if argvWrappers[w] {
			s.atCmd, s.wrapper = true, true // nsenter/env/timeout … run their argument
		}
	}
}

// builtin notes a keyword or builtin in command position.
func (s *shellScan) builtin(w string) {
	if w == "command" {
		s.checking = true // `command -v X`: the script needs X
	}
	if w == "case" {
		s.inCase++
	} else if w == "esac" && s.inCase > 0 {
		s.inCase--
	}
	// keywords keep the command position (if cmd, then cmd, ! cmd, time cmd); the others take arguments
	switch w {
	case "if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "exec", "command":
	default:
		s.atCmd = false
	}
}

// matchParen returns the index of the ')' closing the '(' at open (or the end of the text).
func matchParen(rs []rune, open int) int {
	depth := 0
	for i := open; i < len(rs); i++ {
		switch rs[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		case '\'':
			for i++; i < len(rs) && rs[i] != '\''; {
				i++
			}
		}
	}
	return len(rs) - 1
}

// readScripts returns the repository's shell scripts (by shebang) with their paths.
func readScripts(root string, paths []string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, err
		}
		m[p] = string(b)
	}
	return m, nil
}
