package contrib_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// TestPythonTokens: the Python examples (stage.py on the package
// pepsi-stage, onetrip.py on psycopg2), told PEPSI_PROTOCOL=2, say hello
// first and take id lines with a token and without: a current token's
// pass and a bare id are moved, and a token that is not the message's
// current pass is refused, its work rolled back. Without PEPSI_PROTOCOL
// there is no hello.
func TestPythonTokens(t *testing.T) {
	t.Parallel()
	need(t, "python3 with psycopg2", "apt-get install -y python3-psycopg2", "/usr/bin/python3", "-c", "import psycopg2")
	py, _ := pythonVenv(t)
	db, dsn := pgtest.New(t)
	ctx := context.Background()
	for _, program := range []string{"python/stage.py", "python/onetrip.py"} {
		t.Run(filepath.Base(program), func(t *testing.T) {
			// stage.py runs on the package pepsi-stage, in its virtualenv;
			// onetrip.py on Debian's python3 with psycopg2 (its first line).
			run := func(abs string, args ...string) *exec.Cmd {
				if program == "python/stage.py" {
					return exec.Command(py, append([]string{abs}, args...)...)
				}
				return exec.Command(abs, args...)
			}
			c := db.Claimed(t, "a", []byte("x"), []byte("x"), []byte("x"))
			ids := []int64{c[0].ID, c[1].ID, c[2].ID}
			pass := map[int64]int64{}
			for _, p := range c {
				pass[p.ID] = p.Pass
			}
			stale := pass[ids[1]] + 1
			in := string(protocol.AppendIDLine(nil, ids[0], pass[ids[0]])) +
				string(protocol.AppendIDLine(nil, ids[1], stale)) +
				string(protocol.AppendIDLine(nil, ids[2], 0))
			abs, err := filepath.Abs(program)
			if err != nil {
				t.Fatal(err)
			}
			cmd := run(abs, "--next", "b")
			cmd.Env = append(os.Environ(), "PEPSI_DSN="+dsn, "PEPSI_STAGE=a", "PEPSI_PROTOCOL=2")
			cmd.Stdin = strings.NewReader(in)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v; stderr:\n%s", program, err, errb.String())
			}
			lines := strings.Split(out.String(), "\n")
			if len(lines) != 5 || lines[0] != "hello token" || lines[1] != "0" || !strings.HasPrefix(lines[2], "1 # ") ||
				!strings.Contains(lines[2], fmt.Sprintf("message %d is not running pass %d", ids[1], stale)) || lines[3] != "0" || lines[4] != "" {
				t.Errorf("stdout %q; want the hello, 0, the stale pass refused, 0", out.String())
			}
			for i, want := range []string{"b", "a", "b"} {
				var stage string
				var header *string
				err := db.Pool.QueryRow(ctx, "SELECT s.stage, m.headers ->> 'a' FROM pepsi.state s JOIN pepsi.message m USING (id) WHERE s.id = $1", ids[i]).
					Scan(&stage, &header)
				if err != nil {
					t.Fatal(err)
				}
				if stage != want || (header == nil) != (want == "a") {
					t.Errorf("message %d: at %s, header a %v; want at %s, the work rolled back with a refused move", ids[i], stage, header, want)
				}
			}

			// Not told the protocol: no hello.
			cmd = run(abs)
			cmd.Env = append(os.Environ(), "PEPSI_DSN="+dsn, "PEPSI_STAGE=a", "PEPSI_PROTOCOL=")
			if out, err := cmd.Output(); err != nil || len(out) != 0 {
				t.Errorf("without PEPSI_PROTOCOL at EOF: %v, stdout %q; want nothing", err, out)
			}
		})
	}
}
