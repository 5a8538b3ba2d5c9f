package contrib_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestDeb builds the Debian package with make deb, has lintian check it
// (no error, no warning), and checks what it holds: the binary and its
// pepsi-COMMAND links, the man pages, the units (systemd-analyze verify,
// against the package's own binary), the conffile, the maintainer
// scripts, the shell completion. Unpacked with dpkg-deb -x, never
// installed: the binary prints its version, answers --help through a
// link, migrates a database with the packaged pepsi.conf once its DSN is
// set, and completes pepsi-queue's commands in bash.
func TestDeb(t *testing.T) {
	t.Parallel()
	need(t, "dpkg-deb", "apt-get install -y dpkg", "dpkg-deb", "--version")
	need(t, "make", "apt-get install -y make", "make", "--version")
	need(t, "lintian", "apt-get install -y lintian", "lintian", "--version")

	dist := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "deb", "DIST="+dist)
	cmd.Dir = ".."
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	t.Logf("make deb: %s", time.Since(start).Round(time.Millisecond))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	deb := lines[len(lines)-1]
	if filepath.Dir(deb) != dist || !strings.HasPrefix(filepath.Base(deb), "pepsi_") || !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("make deb did not end with the package's path in %s:\n%s", dist, out)
	}

	lint := exec.Command("lintian", "--fail-on", "error,warning", "--display-info", deb)
	lint.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	start = time.Now()
	out, err = lint.CombinedOutput()
	t.Logf("lintian %s (%s):\n%s", filepath.Base(deb), time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Errorf("lintian: %v (errors and warnings fail; see contrib/debian/README.md)", err)
	}

	field := func(name string) string {
		return strings.TrimSpace(run(t, "dpkg-deb", "--field", deb, name))
	}
	for name, want := range map[string]string{
		"Package":      "pepsi",
		"Depends":      "adduser",
		"Architecture": strings.TrimSpace(run(t, "dpkg", "--print-architecture")),
	} {
		if got := field(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	version := field("Version")
	if !strings.HasPrefix(filepath.Base(deb), "pepsi_"+version+"_") {
		t.Errorf("the file %s is not of version %s", deb, version)
	}

	ctrl := t.TempDir()
	run(t, "dpkg-deb", "--control", deb, ctrl)
	if b, _ := os.ReadFile(filepath.Join(ctrl, "conffiles")); string(b) != "/etc/pepsi/pepsi.conf\n" {
		t.Errorf("conffiles: %q, want only /etc/pepsi/pepsi.conf", b)
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		run(t, "sh", "-n", filepath.Join(ctrl, s))
	}
	if b, _ := os.ReadFile(filepath.Join(ctrl, "postinst")); !strings.Contains(string(b), "adduser --system --group --home /var/lib/pepsi") ||
		regexp.MustCompile(`deb-systemd-invoke (start|restart) |deb-systemd-helper enable pepsi`).Match(b) {
		t.Errorf("postinst does not make the user pepsi, or enables or starts a unit at install:\n%s", b)
	}

	checkDebContents(t, deb)

	root := t.TempDir()
	run(t, "dpkg-deb", "--extract", deb, root)
	checkDebRuns(t, root)
}

// checkDebContents checks dpkg-deb --contents: each path the package must
// hold, with its mode (and a link's target), every file owned by root.
func checkDebContents(t *testing.T, deb string) {
	t.Helper()
	type entry struct{ mode, target string }
	got := map[string]entry{}
	for _, l := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "--contents", deb)), "\n") {
		// drwxr-xr-x root/root 0 2026-12-07 12:43 ./etc/ [-> target]
		f := strings.Fields(l)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb --contents: %q", l)
		}
		if f[1] != "root/root" {
			t.Errorf("%s is owned by %s", f[5], f[1])
		}
		e := entry{mode: f[0]}
		if len(f) == 8 && f[6] == "->" {
			e.target = f[7]
		}
		got[strings.TrimPrefix(f[5], ".")] = e
	}
	want := map[string]entry{
		"/usr/bin/pepsi":                                           {mode: "-rwxr-xr-x"},
		"/etc/pepsi/pepsi.conf":                                    {mode: "-rw-r--r--"},
		"/lib/systemd/system/pepsi-dispatch.service":               {mode: "-rw-r--r--"},
		"/lib/systemd/system/pepsi-dispatch@.service":              {mode: "-rw-r--r--"},
		"/lib/systemd/system/pepsi-httpd.service":                  {mode: "-rw-r--r--"},
		"/usr/share/doc/pepsi/copyright":                           {mode: "-rw-r--r--"},
		"/usr/share/doc/pepsi/changelog.gz":                        {mode: "-rw-r--r--"},
		"/usr/share/doc/pepsi/README.Debian.gz":                    {mode: "-rw-r--r--"},
		"/usr/share/doc/pepsi/examples/prometheus/pepsi.rules.yml": {mode: "-rw-r--r--"},
		"/usr/share/doc/pepsi/examples/pipeline/pepsi.conf":        {mode: "-rw-r--r--"},
		"/usr/share/bash-completion/completions/pepsi":             {mode: "-rw-r--r--"},
		"/usr/share/zsh/vendor-completions/_pepsi":                 {mode: "-rw-r--r--"},
	}
	for _, n := range aliases(t) {
		want["/usr/bin/"+n] = entry{mode: "lrwxrwxrwx", target: "pepsi"}
		want["/usr/share/bash-completion/completions/"+n] = entry{mode: "lrwxrwxrwx", target: "pepsi"}
	}
	pages, _ := filepath.Glob("../man/*.[157]")
	if len(pages) < 10 {
		t.Fatalf("man pages: %v", pages)
	}
	for _, p := range pages {
		want["/usr/share/man/man"+p[len(p)-1:]+"/"+filepath.Base(p)+".gz"] = entry{mode: "-rw-r--r--"}
	}
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("the package has no %s", p)
		} else if g != w {
			t.Errorf("%s: %+v, want %+v", p, g, w)
		}
	}
	for p := range got {
		if strings.HasPrefix(p, "/usr/local") || strings.HasPrefix(p, "/var") || strings.HasPrefix(p, "/home") {
			t.Errorf("the package holds %s", p)
		}
	}
}

// checkDebRuns checks the package unpacked in root.
func checkDebRuns(t *testing.T, root string) {
	t.Helper()
	bin := filepath.Join(root, "usr/bin")
	exe := func(name string, env []string, args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "PEPSI_")
		}), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := exe("pepsi", nil, "version")
	if err != nil || !strings.HasPrefix(out, "pepsi ") {
		t.Errorf("pepsi version: %v: %q", err, out)
	}
	if describe, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil &&
		strings.TrimSpace(out) != "pepsi "+strings.TrimSpace(string(describe)) {
		t.Errorf("pepsi version printed %q; git describe says %q", out, describe)
	}
	for _, n := range aliases(t) {
		out, err := exe(n, nil, "--help")
		cmd := strings.TrimPrefix(n, "pepsi-")
		if err != nil || !strings.Contains(out, "pepsi "+cmd) {
			t.Errorf("%s --help (through the link): %v\n%s", n, err, out)
		}
	}

	// The conffile as shipped: parsed, and wanting a database.
	conf := filepath.Join(root, "etc/pepsi/pepsi.conf")
	out, err = exe("pepsi-queue", []string{"PEPSI_CONFIG=" + conf})
	if code := exitCode(err); code != 2 || !strings.Contains(out, "no database: set [database] DSN in "+conf) {
		t.Errorf("pepsi-queue with the packaged pepsi.conf: exit %d, want 2 and no database:\n%s", code, out)
	}
	// With its DSN line set, it migrates a database.
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	dsnLine := regexp.MustCompile(`(?m)^;DSN = .*$`)
	if !dsnLine.Match(b) {
		t.Fatalf("%s has no ;DSN = line to uncomment", conf)
	}
	set := filepath.Join(t.TempDir(), "pepsi.conf")
	if err := os.WriteFile(set, dsnLine.ReplaceAll(b, []byte("DSN = "+pgtest.Empty(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exe("pepsi-migrate", []string{"PEPSI_CONFIG=" + set}); err != nil {
		t.Errorf("pepsi-migrate with the packaged pepsi.conf and a DSN: %v\n%s", err, out)
	}
	if out, err := exe("pepsi", nil, "-c", set, "migrate", "status"); err != nil || !strings.Contains(out, "functions (") {
		t.Errorf("pepsi migrate status: %v\n%s", err, out)
	}

	// man pepsi-dispatch, from the package's pages.
	need(t, "man", "apt-get install -y man-db", "man", "--version")
	cmd := exec.Command("man", "--manpath="+filepath.Join(root, "usr/share/man"), "pepsi-dispatch")
	cmd.Env = append(os.Environ(), "MANPAGER=cat", "MANWIDTH=80", "LC_ALL=C.UTF-8")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PEPSI-DISPATCH(1)") {
		t.Errorf("man pepsi-dispatch: %v\n%.500s", err, out)
	}

	// Completion, as bash-completion loads it for a link: by its name.
	comp := filepath.Join(root, "usr/share/bash-completion/completions/pepsi-queue")
	cmd = exec.Command("bash", "-c", `. "$0" && COMP_WORDS=(pepsi-queue pa) COMP_CWORD=1 && _pepsi && echo "${COMPREPLY[*]}"`, comp)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "pause\n" {
		t.Errorf("completion of pepsi-queue pa with %s: %v: %q, want pause", comp, err, out)
	}

	checkDebUnits(t, root)
}

// checkDebUnits checks the packaged units: ExecStart a program of the
// package, run as pepsi, and systemd-analyze verify content with them,
// against root (the package, and the system's targets copied in).
func checkDebUnits(t *testing.T, root string) {
	t.Helper()
	units, _ := filepath.Glob(filepath.Join(root, "lib/systemd/system/*.service"))
	if len(units) != 3 {
		t.Fatalf("units: %v", units)
	}
	verify := []string{"verify", "--root=" + root, "--man=no", "--recursive-errors=no"}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^ExecStart=(\S+)`).FindSubmatch(b)
		if m == nil || !strings.HasPrefix(string(m[1]), "/usr/bin/pepsi-") {
			t.Errorf("%s: ExecStart is not a /usr/bin/pepsi-COMMAND", u)
		} else if _, err := os.Stat(filepath.Join(root, string(m[1]))); err != nil {
			t.Errorf("%s: ExecStart: %v", u, err)
		}
		if !strings.Contains(string(b), "\nUser=pepsi\n") {
			t.Errorf("%s: not User=pepsi", u)
		}
		if strings.Contains(string(b), "--listen :") {
			t.Errorf("%s: listens on every interface", u)
		}
		name := filepath.Base(u)
		if name == "pepsi-dispatch@.service" {
			name = "pepsi-dispatch@parse.service"
		}
		verify = append(verify, "/lib/systemd/system/"+name)
	}
	need(t, "systemd-analyze", "apt-get install -y systemd", "systemd-analyze", "--version")
	targets, _ := filepath.Glob("/lib/systemd/system/*.target")
	for _, tg := range targets {
		if b, err := os.ReadFile(tg); err == nil {
			_ = os.WriteFile(filepath.Join(root, "lib/systemd/system", filepath.Base(tg)), b, 0o644)
		}
	}
	if out, err := exec.Command("systemd-analyze", verify...).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze %s: %v\n%s", strings.Join(verify, " "), err, out)
	}
}

// aliases returns the Makefile's ALIASES: the pepsi-COMMAND links.
func aliases(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ALIASES\s*:=\s*(.+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile has no ALIASES")
	}
	return strings.Fields(string(m[1]))
}

// run runs a command that must succeed and returns its standard output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

// exitCode is a command's exit status from its error (0 for nil, -1 when
// it did not exit).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
