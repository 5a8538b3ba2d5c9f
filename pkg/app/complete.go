package app

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/config"
)

// completeArg is the hidden first argument of the shell completion hook:
// "pepsi __complete WORD... CUR" prints, one a line, what may replace CUR,
// the word being completed ("" after a space), given the WORDs before it.
// contrib/completion/pepsi.bash and _pepsi call it. Unlike urfave/cli's
// --generate-bash-completion, CUR is always passed, so a flag's value and
// a flag being typed are told apart.
const completeArg = "__complete"

// stageFlags are the flags whose value is a stage name (stages: a list).
var stageFlags = map[string]bool{"stage": true, "stages": true, "to-stage": true}

// complete writes the candidates for words (the command line after
// argv[0], the last word being the one completed) to w. It never writes
// an error: an unreadable configuration gives no stage names, and a panic
// gives nothing.
func complete(app *cli.App, words []string, w io.Writer) {
	defer func() { _ = recover() }()
	if len(words) == 0 {
		words = []string{""}
	}
	cur := words[len(words)-1]
	var (
		cmd     *cli.Command // nil: the application itself
		flags   = app.Flags
		subs    = app.Commands
		conf    string
		pending cli.Flag // a flag whose value comes next
		args    int      // positional arguments seen
		dashes  bool     // after "--"
	)
	for _, word := range words[:len(words)-1] {
		switch {
		case pending != nil:
			if isConfig(pending) {
				conf = word
			}
			pending = nil
		case word == "--":
			dashes = true
		case !dashes && len(word) > 1 && word[0] == '-':
			name, value, inline := strings.Cut(strings.TrimLeft(word, "-"), "=")
			f := findFlag(flags, name)
			if f != nil && isConfig(f) && inline {
				conf = value
			} else if f != nil && takesValue(f) && !inline {
				pending = f
			}
		case args == 0 && findCommand(subs, word) != nil:
			cmd = findCommand(subs, word)
			flags, subs = cmd.Flags, cmd.Subcommands
		case cmd == nil && args == 0 && word == "help":
			// "pepsi help COMMAND": complete the command.
		default:
			args++
		}
	}

	var out []string
	stages := func(prefix, part string) {
		listed := strings.Split(prefix, ",")
		for _, s := range stageNames(conf) {
			if strings.HasPrefix(s, part) && !slices.Contains(listed, s) {
				out = append(out, prefix+s)
			}
		}
	}
	switch {
	case pending != nil:
		if name := pending.Names()[0]; stageFlags[name] {
			prefix, part := "", cur
			if name == "stages" {
				if i := strings.LastIndexByte(cur, ','); i >= 0 {
					prefix, part = cur[:i+1], cur[i+1:]
				}
			}
			stages(prefix, part)
		}
		// Any other value (a FILE, a number, …): nothing; the shell
		// completes file names.
	case !dashes && strings.HasPrefix(cur, "-"):
		name, value, inline := strings.Cut(strings.TrimLeft(cur, "-"), "=")
		if f := findFlag(flags, name); inline && f != nil {
			if stageFlags[f.Names()[0]] {
				stages(cur[:len(cur)-len(value)], value)
			}
			break
		}
		for _, f := range append(slices.Clip(flags), cli.HelpFlag) {
			if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
				continue
			}
			for _, n := range f.Names() {
				if n = dash(n); strings.HasPrefix(n, cur) {
					out = append(out, n)
				}
			}
		}
	case args == 0 && len(subs) > 0:
		for _, c := range subs {
			if !c.Hidden && strings.HasPrefix(c.Name, cur) {
				out = append(out, c.Name)
			}
		}
		if cmd == nil && strings.HasPrefix("help", cur) && !slices.Contains(words[:len(words)-1], "help") {
			out = append(out, "help")
		}
	}
	for _, s := range out {
		fmt.Fprintln(w, s)
	}
}

// stageNames returns the stages of the configuration the command would
// read (-c, else $PEPSI_CONFIG, else the default file), or none when it
// cannot be read. No DSN is needed.
func stageNames(path string) []string {
	if path == "" {
		path = os.Getenv("PEPSI_CONFIG")
	}
	if path == "" {
		path = config.DefaultPath
	}
	c, err := config.Load(path)
	if err != nil {
		return nil
	}
	return c.StageNames()
}

// findFlag returns the flag of flags called name, or nil.
func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// findCommand returns the command of cmds called name, or nil.
func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether f takes a value (not a boolean flag).
func takesValue(f cli.Flag) bool {
	v, ok := f.(cli.DocGenerationFlag)
	return ok && v.TakesValue()
}

// isConfig reports whether f is -c/--config.
func isConfig(f cli.Flag) bool { return f.Names()[0] == "config" }

// dash returns a flag name as typed: -c, --config.
func dash(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
