package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestBinary runs the real executable, through its name and through a
// pepsi-migrate symlink, and checks exit statuses and stderr as a shell
// sees them.
func TestBinary(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	link := filepath.Join(dir, "pepsi-migrate")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	_, dsn := pgtest.New(t)
	conf := env(t, dsn, stagesConf)

	t.Run("alias", func(t *testing.T) {
		a := exe(t, link, "", "status")
		b := exe(t, bin, "", "migrate", "status")
		a.wantCode(t, 0)
		if a != b || !strings.Contains(a.stdout, "VERSION") {
			t.Errorf("pepsi-migrate status: %+v\npepsi migrate status: %+v", a, b)
		}
		r := exe(t, link, "")
		r.wantCode(t, 0)
		if !strings.HasPrefix(r.stdout, "schema is up to date") {
			t.Errorf("pepsi-migrate printed %q", r.stdout)
		}
		a, b = exe(t, link, "", "--help"), exe(t, bin, "", "migrate", "--help")
		if a != b {
			t.Errorf("pepsi-migrate --help differs from pepsi migrate --help:\n%s\n%s", a.stdout, b.stdout)
		}
	})

	t.Run("version", func(t *testing.T) {
		r := exe(t, bin, "", "version")
		r.wantCode(t, 0)
		if r.stdout != "pepsi test\n" {
			t.Errorf("version printed %q", r.stdout)
		}
	})

	t.Run("enqueue", func(t *testing.T) {
		r := exe(t, bin, "a\nb\nc\n", "enqueue", "--stage", "parse", "--lines")
		r.wantCode(t, 0)
		if got := ids(t, r.stdout); len(got) != 3 {
			t.Errorf("ids %v", got)
		}
		r = exe(t, bin, "x", "enqueue", "--stage", "nope")
		r.wantCode(t, 2)
		r.wantOneError(t, `pepsi enqueue: --stage "nope": no [stage-nope] in `+conf)
	})

	t.Run("errors", func(t *testing.T) {
		bad := filepath.Join(dir, "pepsi.conf")
		os.WriteFile(bad, []byte("[database]\nDSN = postgres:///x\n[stage-parse]\nPROGRAM = /bin/cat\nPARALELLISM = 4\n"), 0o644)
		long := filepath.Join(dir, "long.conf")
		os.WriteFile(long, []byte("[stage-"+strings.Repeat("s", 70)+"]\nPROGRAM = /bin/cat\n"), 0o644)
		fast := filepath.Join(dir, "rate.conf")
		os.WriteFile(fast, []byte("[database]\nDSN = postgres:///x\n[stage-parse]\nPROGRAM = /bin/cat\nRATE = fast\n"), 0o644)
		payload := filepath.Join(dir, "key.conf")
		os.WriteFile(payload, []byte("[database]\nDSN = postgres:///x\n[stage-parse]\nPROGRAM = /bin/cat\nKEY = payload\n"), 0o644)
		zero := filepath.Join(dir, "keylimit.conf")
		os.WriteFile(zero, []byte("[database]\nDSN = postgres:///x\n[stage-parse]\nPROGRAM = /bin/cat\nKEY = header:customer\nKEY_LIMIT = 0\n"), 0o644)
		for _, tc := range []struct {
			path string
			args []string
			code int
			want string
		}{
			{link, []string{"-c", bad, "status"}, 2, "pepsi migrate status: " + bad + `:5: unknown key "PARALELLISM"`},
			{bin, []string{"-c", bad, "migrate"}, 2, bad + ":5: unknown key"},
			{bin, []string{"-c", fast, "dispatch"}, 2, "pepsi dispatch: " + fast + `:5: RATE: bad rate "fast" (want COUNT/s, COUNT/m or COUNT/h, such as 50/s)`},
			{bin, []string{"-c", payload, "dispatch"}, 2, "pepsi dispatch: " + payload + `:5: KEY: bad key "payload" (want header:NAME, such as header:customer)`},
			{bin, []string{"-c", zero, "dispatch"}, 2, "pepsi dispatch: " + zero + `:6: KEY_LIMIT: must be an integer >= 1, not "0"`},
			{bin, []string{"-c", long, "enqueue", "-s", "x"}, 2, "pepsi enqueue: " + long + `:1: bad stage name "` + strings.Repeat("s", 70) + `"`},
			{bin, []string{"migrate", "--frobnicate"}, 2, "pepsi migrate: flag provided but not defined: -frobnicate"},
			{link, []string{"--frobnicate"}, 2, "pepsi migrate: flag provided but not defined: -frobnicate"},
			{bin, []string{"frobnicate"}, 2, `pepsi: unknown command "frobnicate"`},
			{bin, []string{"dispatch", "--log-level", "loud"}, 2, `pepsi dispatch: --log-level "loud": want debug, info, warn or error`},
			{bin, []string{"enqueue", "-s", "parse", filepath.Join(dir, "missing")}, 1, "missing: no such file or directory"},
		} {
			r := exe(t, tc.path, "", tc.args...)
			r.wantCode(t, tc.code)
			r.wantOneError(t, tc.want)
			if strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, "panic") {
				t.Errorf("stack trace:\n%s", r.stderr)
			}
		}

		t.Setenv("PEPSI_DSN", "host=/nonexistent-pepsi-socket-dir")
		r := exe(t, link, "")
		r.wantCode(t, 1)
		r.wantOneError(t, "pepsi migrate: connect:")

		r = exe(t, bin, "")
		r.wantCode(t, 2)
		if r.stderr != "" || !strings.Contains(r.stdout, "COMMANDS:") {
			t.Errorf("no command: stdout %q stderr %q", r.stdout, r.stderr)
		}
	})
}
