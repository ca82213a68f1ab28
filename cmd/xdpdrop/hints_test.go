package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// hintSources are the packages whose text can reach a user of the CLI:
// the CLI itself and everything whose errors it prints.
var hintSources = []string{
	".",
	"../../loader",
	"../../fastdrop",
	"../../dropctl",
	"../../agent",
	"../../xsk",
	"../../metrics",
	"../../benchmark",
	"../../pktgen",
	"../../internal/bpffs",
	"../../internal/ethtool",
	"../../sandbox",
}

// proseAfterName are words that follow "xdpdrop " in prose ("an xdpdrop
// program") rather than in a command line.
var proseAfterName = map[string]bool{
	"program": true, "programs": true, "metadata": true, "drops": true,
	"does": true, "from": true, "attached": true, "command": true, "has": true,
}

// literal is one string literal of the sources.
type literal struct {
	pos  string
	text string
}

// sourceLiterals returns the string literals of the non-test Go files in
// dirs, without import paths and struct tags.
func sourceLiterals(t *testing.T, dirs []string) []literal {
	t.Helper()
	var out []literal
	eachSourceFile(t, dirs, func(fset *token.FileSet, f *ast.File) {
		skip := map[*ast.BasicLit]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ImportSpec:
				skip[n.Path] = true
			case *ast.Field:
				if n.Tag != nil {
					skip[n.Tag] = true
				}
			case *ast.BasicLit:
				if n.Kind == token.STRING && !skip[n] {
					s, err := strconv.Unquote(n.Value)
					require.NoError(t, err)
					out = append(out, literal{fset.Position(n.Pos()).String(), s})
				}
			}
			return true
		})
	})
	return out
}

// commandLine is "xdpdrop" followed by words, as far as a hint goes.
var hintEnd = regexp.MustCompile("['`\")(;,\n]")

var flagToken = regexp.MustCompile(`(?:^|[\s'"(\[` + "`" + `])--([a-z][a-z0-9-]*)`)

// checkHint checks one "xdpdrop ..." command line against the command
// tree: the command exists, and so does each --flag for it; a line that
// names flags names the required ones too.
func checkHint(root *cobra.Command, line string) string {
	words := strings.Fields(line)
	if len(words) < 2 {
		return ""
	}
	name := words[1]
	cur, rest, err := root.Find(words[1:])
	if err != nil || cur == root {
		if proseAfterName[name] || !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(name) {
			return "" // prose, or a placeholder such as COMMAND
		}
		return "names command " + strconv.Quote(name) + ", which does not exist"
	}
	// root.Find stops at the first word that is not a subcommand; a
	// command that only groups others (rules) needs one of them.
	if !cur.Runnable() && cur.HasSubCommands() && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		// "completion bash|zsh|fish" names each alternative.
		for _, alt := range strings.Split(rest[0], "|") {
			if c, _, err := cur.Find([]string{alt}); err != nil || c == cur {
				return "names " + strconv.Quote(cur.CommandPath()+" "+alt) + ", which does not exist"
			}
		}
		return ""
	}
	named := map[string]bool{}
	for _, w := range words[1:] {
		if !strings.HasPrefix(w, "--") || len(w) < 3 {
			continue
		}
		fl, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		if !regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(fl) {
			continue
		}
		named[fl] = true
		if fl != "help" && cur.Flags().Lookup(fl) == nil && cur.InheritedFlags().Lookup(fl) == nil {
			return "names flag --" + fl + ", which " + strconv.Quote(cur.CommandPath()) + " does not have"
		}
	}
	if len(named) > 0 && !named["help"] {
		var missing []string
		cur.Flags().VisitAll(func(f *pflag.Flag) {
			if req := f.Annotations[cobra.BashCompOneRequiredFlag]; len(req) > 0 && req[0] == "true" && !named[f.Name] {
				missing = append(missing, "--"+f.Name)
			}
		})
		if len(missing) > 0 {
			return "leaves out the required " + strings.Join(missing, ", ")
		}
	}
	return ""
}

// allFlags is every flag of every command in the tree.
func allFlags(root *cobra.Command) map[string]bool {
	out := map[string]bool{"help": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { out[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { out[f.Name] = true })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return out
}

// hintProblems returns, for each literal, what is wrong with the commands
// and flags it names.
func hintProblems(root *cobra.Command, lits []literal) []string {
	flags := allFlags(root)
	var bad []string
	for _, l := range lits {
		s := l.text
		for i := 0; ; {
			j := strings.Index(s[i:], "xdpdrop ")
			if j < 0 {
				break
			}
			j += i
			i = j + len("xdpdrop ")
			if j > 0 && strings.ContainsAny(s[j-1:j], "abcdefghijklmnopqrstuvwxyz/_-.") {
				continue // a path or another word: github.com/xdpdrop/xdpdrop
			}
			line := s[j:]
			if k := hintEnd.FindStringIndex(line); k != nil {
				line = line[:k[0]]
			}
			if p := checkHint(root, line); p != "" {
				bad = append(bad, l.pos+": "+strconv.Quote(strings.TrimSpace(line))+" "+p)
			}
		}
		for _, m := range flagToken.FindAllStringSubmatch(s, -1) {
			if !flags[m[1]] {
				bad = append(bad, l.pos+": names flag --"+m[1]+", which no command has: "+strconv.Quote(s))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// TestHintsNameRealCommands collects every command line ("xdpdrop
// COMMAND --flag ...") and every --flag that the CLI's text, and the text
// of the packages whose errors it prints, can show, and checks that each
// exists in the command tree users run.
func TestHintsNameRealCommands(t *testing.T) {
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	root := a.rootCmd()
	lits := sourceLiterals(t, hintSources)
	require.Greater(t, len(lits), 500, "the sources were found")
	bad := hintProblems(root, lits)
	require.Empty(t, bad, "hints that name commands or flags that do not exist:\n%s", strings.Join(bad, "\n"))
}

// TestHintCheckerCatches: the checker above finds what it is for.
func TestHintCheckerCatches(t *testing.T) {
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	root := a.rootCmd()
	for text, want := range map[string]string{
		"(remove it with CleanStale, xdpdrop clean)":              `"clean", which does not exist`,
		"change it with Replace (xdpdrop replace)":                `"replace", which does not exist`,
		"see 'xdpdrop rules show --iface eth3'":                   `"xdpdrop rules show", which does not exist`,
		"run 'xdpdrop detach --iface eth3 --really'":              "--really",
		"foreign: detach with 'xdpdrop detach --force'":           "required --iface",
		"or retry with --no-such-flag":                            "--no-such-flag, which no command has",
		"'xdpdrop drop --iface eth3 --rules FILE --lock-timeout'": "",
		"an xdpdrop program; github.com/xdpdrop/xdpdrop":          "",
		"see 'xdpdrop status --clean'":                            "",
		"'xdpdrop rules list --iface %s'":                         "",
		"xdpdrop completion bash|zsh|fish":                        "",
		"xdpdrop completion bash|tcsh":                            `"xdpdrop completion tcsh"`,
	} {
		bad := hintProblems(root, []literal{{"x.go:1", text}})
		if want == "" {
			require.Empty(t, bad, text)
			continue
		}
		require.NotEmpty(t, bad, text)
		require.Contains(t, strings.Join(bad, "\n"), want, text)
	}
}

// identSources are the packages whose error texts must name no Go
// identifiers: the CLI and every package whose errors the CLI prints as
// they are. Their errors are written for both audiences: in plain words
// (the table that is full, "bind in copy mode"), which a Go caller maps
// to an option through the package's documentation (fastdrop.ErrCapacity
// lists the Options fields), and where the CLI can say more it wraps the
// error with its flags (redirect: "leave out --zero-copy").
var identSources = []string{
	".",
	"../../loader",
	"../../fastdrop",
	"../../dropctl",
	"../../agent",
	"../../xsk",
	"../../benchmark",
	"../../pktgen",
	"../../metrics",
	"../../sandbox",
	"../../internal/bpffs",
	"../../internal/caps",
	"../../internal/ethtool",
}

// plainWords are identifiers that are also units or words in output:
// CPUs is a plural, EtherType the Ethernet field's name in IEEE 802.3,
// FlowSpec the BGP family of RFC 8955.
var plainWords = map[string]bool{"Mpps": true, "CPUs": true, "EtherType": true, "FlowSpec": true}

// TestErrorsNameNoGoIdentifiers: text that reaches the CLI names no Go
// identifiers of the packages (CleanStale, DetachInterface, set Force,
// raise Options.MaxRules): a user of the CLI cannot act on them.
func TestErrorsNameNoGoIdentifiers(t *testing.T) {
	idents := goIdents(t, identSources)
	bad := identProblems(idents, errorLiterals(t, identSources))
	require.Empty(t, bad, "error texts that name Go identifiers:\n%s", strings.Join(bad, "\n"))
}

// goIdents are the names the packages in dirs declare: functions and
// methods, types, constants and variables, struct fields.
func goIdents(t *testing.T, dirs []string) map[string]bool {
	t.Helper()
	idents := map[string]bool{}
	eachSourceFile(t, dirs, func(fset *token.FileSet, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				idents[n.Name.Name] = true
			case *ast.TypeSpec:
				idents[n.Name.Name] = true
			case *ast.ValueSpec:
				for _, id := range n.Names {
					idents[id.Name] = true
				}
			case *ast.Field:
				for _, id := range n.Names {
					idents[id.Name] = true
				}
			}
			return true
		})
	})
	return idents
}

// identProblems returns the words of lits that are exported Go
// identifiers in idents: upper-case first letter, not an acronym (XDP,
// TCP), not in plainWords, and not the first word of the text or of a
// sentence (after ". "). Both halves of a selector count: in
// "Options.MaxRules" the period is not the end of a sentence.
func identProblems(idents map[string]bool, lits []literal) []string {
	word := regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`)
	var bad []string
	for _, l := range lits {
		for _, loc := range word.FindAllStringIndex(l.text, -1) {
			w := l.text[loc[0]:loc[1]]
			if !idents[w] || w[0] < 'A' || w[0] > 'Z' || strings.ToUpper(w) == w || plainWords[w] {
				continue
			}
			head := l.text[:loc[0]]
			before := strings.TrimRight(head, " ")
			if before == "" || (len(before) < len(head) && strings.HasSuffix(before, ".")) {
				continue // the start of a sentence
			}
			bad = append(bad, l.pos+": "+w+" in "+strconv.Quote(l.text))
		}
	}
	return bad
}

// TestIdentCheckerCatches: the checker above finds the identifiers of
// the errors it was written for, both halves of a selector among them,
// and lets plain words and sentence starts through.
func TestIdentCheckerCatches(t *testing.T) {
	idents := map[string]bool{"Options": true, "MaxRules": true, "BindCopy": true, "BindAuto": true,
		"Run": true, "CPUs": true, "Force": true, "Interface": true}
	for text, want := range map[string][]string{
		"%d rules: %w (raise Options.MaxRules, now %d)":  {"Options", "MaxRules"},
		"zero-copy mode: %w (use BindCopy or BindAuto)":  {"BindCopy", "BindAuto"},
		"xsk: Run on ifindex %d":                         {"Run"},
		"fastdrop: Options.MaxRules %d":                  {"Options", "MaxRules"},
		"replace it, or set Force":                       {"Force"},
		"Run is busy. Interface %s is gone":              nil,
		"count possible CPUs: %w":                        nil,
		"the program was loaded with room for %d rules":  nil,
		"bind in copy mode, or let the kernel choose it": nil,
	} {
		bad := identProblems(idents, []literal{{"x.go:1", text}})
		var got []string
		for _, b := range bad {
			w, _, _ := strings.Cut(strings.TrimPrefix(b, "x.go:1: "), " in ")
			got = append(got, w)
		}
		require.Equal(t, want, got, text)
	}
}

// errorLiterals are the string literals passed to fmt.Errorf, errors.New
// and fmt.Sprintf (which builds parts of errors and hints).
func errorLiterals(t *testing.T, dirs []string) []literal {
	t.Helper()
	var out []literal
	eachSourceFile(t, dirs, func(fset *token.FileSet, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch pkg.Name + "." + sel.Sel.Name {
			case "fmt.Errorf", "errors.New", "fmt.Sprintf", "fmt.Fprintf":
			default:
				return true
			}
			for _, arg := range call.Args {
				if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					out = append(out, literal{fset.Position(lit.Pos()).String(), s})
				}
			}
			return true
		})
	})
	return out
}

// eachSourceFile calls fn with each non-test Go file of dirs, parsed; each
// dir must hold some.
func eachSourceFile(t *testing.T, dirs []string, fn func(*token.FileSet, *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	for _, dir := range dirs {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, names, dir)
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			require.NoError(t, err)
			fn(fset, f)
		}
	}
}
