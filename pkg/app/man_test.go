package app

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/metrics"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// The man pages in man/ are written by hand; these tests keep them in step
// with the code. They fail when a command, a subcommand, a flag, a
// configuration key, a statistics column or a Prometheus metric exists in
// the code but is not documented where a reader looks for it:
//
//   - every command of pepsi is an entry (.TP tag) of COMMANDS in pepsi(1),
//     and its flags are entries in its own page, pepsi-COMMAND(1), or, for
//     a command without a page, in pepsi(1); a subcommand is an entry or a
//     .SS heading of its command's page, and its flags are entries in that
//     .SS section when it has one;
//   - every key pepsi.conf accepts is an entry of its section ([database],
//     [pepsi-dispatch], [pepsi-httpd], [stage-NAME]) in pepsi.conf(5), every
//     key of [pepsi-dispatch] and [stage-NAME] an entry in pepsi-dispatch(1),
//     and every key of [pepsi-httpd] an entry in pepsi-httpd(1);
//   - every statistics column is an entry in pepsi-stats(1), and every
//     metric family pepsi stats writes is named there;
//   - every pepsi page a page refers to exists.
//
// "An entry" is the line after a .TP request: the term a definition list
// defines. Mentioning a flag in passing does not document it.

// manDir is where the pages are, from this package's directory.
const manDir = "../../man"

// benchManDir is where the pages of the bench module's commands are
// (pepsi-bench(1): not pepsi's, but a page may refer to it).
const benchManDir = "../../bench/man"

// commandsWithoutPage are documented in pepsi(1) only.
var commandsWithoutPage = map[string]bool{"version": true}

// manSection is the part of a page under one .SH or .SS heading.
type manSection struct {
	heading string   // normalized heading text
	sub     bool     // .SS rather than .SH
	tags    []string // normalized lines that follow .TP
	text    []string // every normalized line
}

// manPage is a page cut into its sections, in order.
type manPage struct {
	name     string
	sections []*manSection
}

// roffText turns roff escapes into the characters they print.
var roffText = strings.NewReplacer(`\-`, "-", `\fB`, "", `\fI`, "", `\fR`, "", `\fP`, "", `\&`, "", `\(dq`, `"`,
	`\(aq`, "'", `\e`, `\`, `\(em`, "-", `\(en`, "-", `\(bu`, "*", `\(mu`, "x", `\(ga`, "`", `\ `, " ", `\c`, "")

// normalize returns what a roff line prints, roughly: escapes resolved, a
// leading macro name and the quotes around its arguments dropped.
func normalize(line string) string {
	s := roffText.Replace(line)
	if strings.HasPrefix(s, ".") {
		_, s, _ = strings.Cut(s, " ")
		s = strings.ReplaceAll(s, `"`, "")
	}
	return strings.TrimSpace(s)
}

func readManPage(t *testing.T, name string) *manPage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(manDir, name))
	if err != nil {
		t.Fatalf("man page: %v", err)
	}
	p := &manPage{name: name, sections: []*manSection{{heading: ""}}}
	cur := p.sections[0]
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, ".SH ") || strings.HasPrefix(l, ".SS "):
			cur = &manSection{heading: normalize(l), sub: strings.HasPrefix(l, ".SS ")}
			p.sections = append(p.sections, cur)
			continue
		case (l == ".TP" || l == ".TQ") && i+1 < len(lines):
			cur.tags = append(cur.tags, normalize(lines[i+1]))
		}
		cur.text = append(cur.text, normalize(l))
	}
	return p
}

// section returns the .SH or .SS section called heading (its first word
// when it has several), or nil.
func (p *manPage) section(heading string) *manSection {
	for _, s := range p.sections {
		if s.heading == heading || strings.Fields(s.heading + " x")[0] == heading {
			return s
		}
	}
	return nil
}

// allTags returns the entries of every section.
func (p *manPage) allTags() []string {
	var tags []string
	for _, s := range p.sections {
		tags = append(tags, s.tags...)
	}
	return tags
}

// word matches a term in a tag: not part of a longer name.
func hasTerm(tags []string, term string) bool {
	re := regexp.MustCompile(`(^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(term) + `($|[^A-Za-z0-9_-])`)
	for _, t := range tags {
		if re.MatchString(t) {
			return true
		}
	}
	return false
}

// flagTerms are the ways a flag is written on the command line.
func flagTerms(f cli.Flag) []string {
	var out []string
	for _, n := range f.Names() {
		if len(n) == 1 {
			out = append(out, "-"+n)
		} else {
			out = append(out, "--"+n)
		}
	}
	return out
}

func TestManCommands(t *testing.T) {
	app := New("test", io.Discard, io.Discard, strings.NewReader(""))
	main := readManPage(t, "pepsi.1")

	commands := main.section("COMMANDS")
	if commands == nil {
		t.Fatal("pepsi.1 has no COMMANDS section")
	}
	options := main.section("OPTIONS")
	for _, f := range app.Flags {
		for _, term := range flagTerms(f) {
			if options == nil || !hasTerm(options.tags, term) {
				t.Errorf("pepsi.1: global option %s is not an entry of OPTIONS", term)
			}
		}
	}
	for _, cmd := range app.Commands {
		if !hasTerm(commands.tags, cmd.Name) {
			t.Errorf("pepsi.1: command %q is not an entry of COMMANDS", cmd.Name)
		}
		page := main
		if !commandsWithoutPage[cmd.Name] {
			name := "pepsi-" + cmd.Name + ".1"
			if _, err := os.Stat(filepath.Join(manDir, name)); err != nil {
				t.Errorf("command %q has no man page %s", cmd.Name, name)
				continue
			}
			page = readManPage(t, name)
		}
		checkCommand(t, page, "pepsi "+cmd.Name, cmd, nil)
	}
}

// checkCommand checks that the flags of cmd, called name, are entries of
// page (of sec, when cmd has a section of its own), and recurses into its
// subcommands.
func checkCommand(t *testing.T, page *manPage, name string, cmd *cli.Command, sec *manSection) {
	t.Helper()
	pageTags := page.allTags()
	for _, f := range cmd.Flags {
		for _, term := range flagTerms(f) {
			switch {
			case sec != nil && hasTerm(sec.tags, term):
			case (sec == nil || term == "--config" || term == "-c") && hasTerm(pageTags, term):
			case sec != nil:
				t.Errorf("%s: option %s of %q is not an entry of section %q", page.name, term, name, sec.heading)
			default:
				t.Errorf("%s: option %s of %q is not an entry of the page", page.name, term, name)
			}
		}
	}
	for _, sub := range cmd.Subcommands {
		s := page.section(sub.Name)
		if s == nil || !s.sub {
			s = nil
			if !hasTerm(pageTags, sub.Name) {
				t.Errorf("%s: subcommand %q is neither a .SS heading nor an entry", page.name, name+" "+sub.Name)
			}
		}
		checkCommand(t, page, name+" "+sub.Name, sub, s)
	}
}

// configKeys reads the keys pepsi.conf accepts from pkg/config's source
// (the table is not exported): section heading → keys.
func configKeys(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../config/parse.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]string{"sectionDatabase": "[database]", "sectionDispatch": "[pepsi-dispatch]", "sectionHTTPD": "[pepsi-httpd]", "stagePrefix": "[stage-NAME]"}
	keys := map[string][]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "keys" || len(vs.Values) != 1 {
			return true
		}
		lit, ok := vs.Values[0].(*ast.CompositeLit)
		if !ok {
			t.Fatal("pkg/config: keys is not a composite literal")
		}
		for _, elt := range lit.Elts {
			kv := elt.(*ast.KeyValueExpr)
			id, ok := kv.Key.(*ast.Ident)
			heading := headings[id.Name]
			if !ok || heading == "" {
				t.Fatalf("pkg/config: keys has an unknown section %v; teach this test its heading", kv.Key)
			}
			for _, v := range kv.Value.(*ast.CompositeLit).Elts {
				s, err := strconv.Unquote(v.(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				keys[heading] = append(keys[heading], s)
			}
		}
		return false
	})
	if len(keys) != len(headings) {
		t.Fatalf("pkg/config: found keys for %d sections, want %d", len(keys), len(headings))
	}
	return keys
}

func TestManConfigKeys(t *testing.T) {
	keys := configKeys(t)
	conf := readManPage(t, "pepsi.conf.5")
	dispatch := readManPage(t, "pepsi-dispatch.1")
	httpd := readManPage(t, "pepsi-httpd.1")
	for heading, ks := range keys {
		sec := conf.section(heading)
		if sec == nil {
			t.Errorf("pepsi.conf.5: no section %s", heading)
			continue
		}
		for _, k := range ks {
			if !hasTerm(sec.tags, k) {
				t.Errorf("pepsi.conf.5: key %s is not an entry of %s", k, heading)
			}
			switch heading {
			case "[database]":
			case "[pepsi-httpd]":
				if !hasTerm(httpd.allTags(), k) {
					t.Errorf("pepsi-httpd.1: key %s of %s is not an entry", k, heading)
				}
			default:
				if !hasTerm(dispatch.allTags(), k) {
					t.Errorf("pepsi-dispatch.1: key %s of %s is not an entry", k, heading)
				}
			}
		}
	}
}

func TestManStats(t *testing.T) {
	page := readManPage(t, "pepsi-stats.1")
	tags := page.allTags()
	for _, f := range slices.Concat(stageFields, dispatchFields) {
		if !hasTerm(tags, f.Name) {
			t.Errorf("pepsi-stats.1: column %s is not an entry", f.Name)
		}
	}
	raw, err := os.ReadFile(filepath.Join(manDir, "pepsi-stats.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range slices.Concat(slices.Collect(maps.Values(stageLabels)), slices.Collect(maps.Values(dispatchLabels))) {
		if !strings.Contains(string(raw), "\n.BR "+l+" .\n") {
			t.Errorf("pepsi-stats.1: the table's name %s for a counter is not given", l)
		}
	}
	_, dsn := pgtest.New(t)
	src := metrics.NewSource(dsn, pgtest.App)
	defer src.Close()
	var out bytes.Buffer
	if err := metrics.WriteStatsText(&out, metrics.StatsOptions{Source: src, Stages: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	var text []string
	for _, s := range page.sections {
		text = append(text, s.text...)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ = strings.Cut(name, " ")
			// A counter's entry may stand for a family of them: pepsi_dispatch_NAME_total.
			if !hasTerm(text, name) && !strings.HasPrefix(name, "pepsi_dispatch_") && !strings.HasPrefix(name, "pepsi_stage_") {
				t.Errorf("pepsi-stats.1: metric %s is not named", name)
			}
		}
	}
}

// TestManReferences: every pepsi page a page refers to, NAME(SECTION), exists.
func TestManReferences(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(manDir, "*.[157]"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no man pages: %v", err)
	}
	ref := regexp.MustCompile(`^\.BR? +(pepsi[a-z.\\-]*) +\(([0-9])\)`)
	for _, p := range pages {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			m := ref.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			target := strings.ReplaceAll(m[1], `\-`, "-") + "." + m[2]
			_, err := os.Stat(filepath.Join(manDir, target))
			if err != nil {
				_, err = os.Stat(filepath.Join(benchManDir, target))
			}
			if err != nil {
				t.Errorf("%s refers to %s(%s), which is not in man/ (nor in bench/man/)", filepath.Base(p), m[1], m[2])
			}
		}
	}
}
