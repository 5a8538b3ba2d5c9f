package app

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const completionDir = "../../contrib/completion"

// completion runs dir/name (the binary or a link to it) with args and env
// (PEPSI_* of the test's own environment dropped), and returns the lines
// it printed. Exit status 0 and nothing on stderr are required: a
// completion must not write into the shell.
func completion(t *testing.T, path string, env []string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PEPSI_")
	}), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || errb.Len() > 0 {
		t.Fatalf("%s %q: %v\nstderr:\n%s", filepath.Base(path), args, err, errb.String())
	}
	return strings.Fields(out.String())
}

// completionSetup builds pepsi with a pepsi-queue link beside it and
// writes a pepsi.conf with the stages parse and store (and no DSN: the
// stage names need none). It returns the directory, the binary and the
// file.
func completionSetup(t *testing.T) (dir, bin, conf string) {
	dir = t.TempDir()
	bin = filepath.Join(dir, "pepsi")
	b, err := os.ReadFile(binary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("pepsi", filepath.Join(dir, "pepsi-queue")); err != nil {
		t.Fatal(err)
	}
	conf = filepath.Join(dir, "pepsi.conf")
	if err := os.WriteFile(conf, []byte(stagesConf), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, bin, conf
}

// TestComplete runs the built binary's completion hook, pepsi __complete
// WORD... CUR: commands, a command's flags, stage names from -c and from
// $PEPSI_CONFIG, a --stages list, the pepsi-queue link, and silence on a
// missing or bad configuration.
func TestComplete(t *testing.T) {
	dir, bin, conf := completionSetup(t)
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("[stage-x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var commands []string
	for _, c := range New("", nil, nil, nil).Commands {
		commands = append(commands, c.Name)
	}
	envConf := []string{"PEPSI_CONFIG=" + conf}
	for _, tc := range []struct {
		link string // "" for pepsi
		env  []string
		args []string
		want []string
	}{
		{args: []string{""}, want: append(slices.Clone(commands), "help")},
		{args: []string{"-c", conf, "q"}, want: []string{"queue"}},
		{args: []string{"help", "mi"}, want: []string{"migrate"}},
		{args: []string{"hel"}, want: []string{"help"}},
		{args: []string{"queue", "p"}, want: []string{"purge", "pause"}},
		{args: []string{"-"}, want: []string{"--config", "-c", "--version", "--help", "-h"}},
		{args: []string{"enqueue", "--l"}, want: []string{"--lines"}},
		{args: []string{"dispatch", "--st"}, want: []string{"--stages", "--standby"}},
		{args: []string{"-c", conf, "enqueue", "--stage", ""}, want: []string{"parse", "store"}},
		{args: []string{"enqueue", "-c", conf, "-s", "st"}, want: []string{"store"}},
		{args: []string{"enqueue", "--config=" + conf, "--stage=p"}, want: []string{"--stage=parse"}},
		{env: envConf, args: []string{"queue", "retry", "--to-stage", ""}, want: []string{"parse", "store"}},
		{env: envConf, args: []string{"dispatch", "--stages", "parse,"}, want: []string{"parse,store"}},
		{env: envConf, args: []string{"enqueue", "-c", ""}, want: nil}, // a FILE: the shell's
		{env: envConf, args: []string{"enqueue", "--stage", "parse", ""}, want: nil},
		{link: "pepsi-queue", env: envConf, args: []string{"re"}, want: []string{"retry", "resume", "release"}},
		{link: "pepsi-queue", env: envConf, args: []string{"pause", "--stage", ""}, want: []string{"parse", "store"}},
		{args: []string{"-c", filepath.Join(dir, "nope.conf"), "enqueue", "--stage", ""}, want: nil},
		{args: []string{"-c", bad, "enqueue", "--stage", ""}, want: nil},
		{env: []string{"PEPSI_CONFIG=" + bad}, args: []string{"queue", "ls", "--stage", ""}, want: nil},
	} {
		path := bin
		if tc.link != "" {
			path = filepath.Join(dir, tc.link)
		}
		got := completion(t, path, tc.env, append([]string{"__complete"}, tc.args...)...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s __complete %q (%v): %q, want %q", filepath.Base(path), tc.args, tc.env, got, tc.want)
		}
	}
}

// TestCompletionBash sources contrib/completion/pepsi.bash in bash, sets
// COMP_WORDS and COMP_CWORD as readline would, calls the function and
// checks COMPREPLY; and checks that _pepsi parses with zsh -n.
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("no bash")
	}
	dir, _, conf := completionSetup(t)
	script, err := filepath.Abs(filepath.Join(completionDir, "pepsi.bash"))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + dir + ":" + os.Getenv("PATH"), "PEPSI_CONFIG=" + conf}
	for _, tc := range []struct {
		words []string // COMP_WORDS; COMP_CWORD is the last
		want  []string
	}{
		{[]string{"pepsi", "mig"}, []string{"migrate"}},
		{[]string{"pepsi", "enqueue", "--stage", ""}, []string{"parse", "store"}},
		{[]string{"pepsi-queue", "pause", "--stage", "s"}, []string{"store"}},
		// --stage=p and --stage=, as bash splits them at the "=".
		{[]string{"pepsi", "enqueue", "--stage", "=", "p"}, []string{"parse"}},
		{[]string{"pepsi", "enqueue", "--stage", "="}, []string{"parse", "store"}},
		{[]string{"pepsi", "dispatch", "--stages", "store,"}, []string{"store,parse"}},
	} {
		args := append([]string{"-c", `. "$0" || exit
complete -p pepsi-queue >/dev/null || exit
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _pepsi
printf '%s\n' "${COMPREPLY[@]}"`, script}, tc.words...)
		got := completion(t, bash, env, args...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("COMP_WORDS=%q: COMPREPLY=%q, want %q", tc.words, got, tc.want)
		}
	}

	if zsh, err := exec.LookPath("zsh"); err == nil {
		if out, err := exec.Command(zsh, "-n", filepath.Join(completionDir, "_pepsi")).CombinedOutput(); err != nil {
			t.Errorf("zsh -n _pepsi: %v\n%s", err, out)
		}
	} else if os.Getenv("CI") == "true" { // .ci/run has installed it
		t.Error("no zsh: _pepsi not checked")
	} else {
		t.Log("no zsh: _pepsi not checked (apt-get install -y zsh)")
	}
}

// TestCompletionNames checks that both scripts register pepsi and every
// alias.
func TestCompletionNames(t *testing.T) {
	for file, re := range map[string]string{
		"pepsi.bash": `(?m)^complete -o default -F _pepsi (.*)$`,
		"_pepsi":     `^#compdef (.*)\n`,
	} {
		b, err := os.ReadFile(filepath.Join(completionDir, file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(re).FindSubmatch(bytes.ReplaceAll(b, []byte("\\\n"), nil))
		if m == nil {
			t.Fatalf("%s: no %s", file, re)
		}
		names := strings.Fields(string(m[1]))
		for _, name := range append([]string{"pepsi"}, slices.Sorted(maps.Keys(aliases))...) {
			if !slices.Contains(names, name) {
				t.Errorf("%s does not complete %s (registers %q)", file, name, names)
			}
		}
	}
}
