package contrib_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/worker/workertest"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// inCI is set by .ci/run's environment: there every example must run.
var inCI = os.Getenv("CI") == "true"

// need skips the test when tool is missing, except in CI, where .ci/run
// has installed it and its absence is a failure.
func need(t *testing.T, what, install string, check ...string) {
	t.Helper()
	if out, err := exec.Command(check[0], check[1:]...).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("%s is not usable (%v: %s); install it: %s", what, err, out, install)
		if inCI {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// TestExamples runs each example as both stages of a two-stage pipeline
// under a real dispatcher and checks where every message ends.
func TestExamples(t *testing.T) {
	goStage := testkit.Build(t, "github.com/pepsi-dev/pepsi/contrib/go/stage")
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, ex := range []struct {
		lang, program string
		check         func(t *testing.T)
	}{
		{"go", goStage, func(*testing.T) {}},
		{"sh", abs("shell/stage.sh"), func(t *testing.T) {
			need(t, "psql", "apt-get install -y postgresql-client", "psql", "--version")
		}},
		{"python", "", func(*testing.T) {}},
		{"node", "", func(*testing.T) {}},
	} {
		t.Run(ex.lang, func(t *testing.T) {
			t.Parallel()
			ex.check(t)
			switch ex.lang {
			case "python":
				ex.program = pythonStage(t) // the package pepsi-stage, installed in a virtualenv
			case "node":
				ex.program = nodeStage(t) // the package @pepsi/stage, installed with npm ci
			}
			p := workertest.Start(t,
				workertest.Stage{Name: "first", Program: ex.program + " --next second", Parallelism: 2, QueueLimit: 4},
				workertest.Stage{Name: "second", Program: ex.program, Parallelism: 1, QueueLimit: 4, MaxMessages: 5})
			payloads := [][]byte{[]byte("hello"), {}, []byte("retry")}
			for i := 0; i < 9; i++ {
				payloads = append(payloads, fmt.Appendf(nil, "message %d", i))
			}
			ids := p.Enqueue("first", payloads...)
			// Generous: the shell example starts a psql per message, slow on a loaded machine.
			p.WaitSettled(5 * time.Minute)
			for i, id := range ids {
				r := p.Row(id)
				switch i {
				case 1:
					if r.Status != "failed" || r.Stage != "first" || r.Error != "empty payload" || r.Headers["first"] != ex.lang {
						t.Errorf("empty payload: %+v", r)
					}
				case 2:
					if r.Status != "done" || r.Stage != "second" || r.Attempts != 2 || r.Headers["second"] != ex.lang {
						t.Errorf("retry: %+v, want done at second after a pause", r)
					}
				default:
					if r.Status != "done" || r.Stage != "second" || r.Attempts != 1 ||
						r.Headers["first"] != ex.lang || r.Headers["second"] != ex.lang || r.DispatchError != "" {
						t.Errorf("payload %q: %+v", payloads[i], r)
					}
				}
			}
			p.Check()
			if got := p.Int64("SELECT paused FROM pepsi.dispatch_stats"); got != 2 {
				t.Errorf("dispatch_stats.paused = %d, want 2 (retry, once per stage)", got)
			}
			if t.Failed() {
				t.Logf("dispatcher log:\n%s", p.Logs)
			}
		})
	}
}

// TestOneTrip: the Python stage that sends its work and its move as one
// query string (pepsi-worker(7), EXAMPLES) moves every message through two
// stages, each pass's work committed with its move.
func TestOneTrip(t *testing.T) {
	t.Parallel()
	need(t, "python3 with psycopg2", "apt-get install -y python3-psycopg2", "/usr/bin/python3", "-c", "import psycopg2")
	program, err := filepath.Abs("python/onetrip.py")
	if err != nil {
		t.Fatal(err)
	}
	p := workertest.Start(t,
		workertest.Stage{Name: "first", Program: program + " --next second", Parallelism: 2, QueueLimit: 4},
		workertest.Stage{Name: "second", Program: program, Parallelism: 2, QueueLimit: 4})
	var payloads [][]byte
	for i := range 40 {
		payloads = append(payloads, fmt.Appendf(nil, "message %d", i))
	}
	ids := p.Enqueue("first", payloads...)
	p.WaitSettled(2 * time.Minute)
	for _, id := range ids {
		if r := p.Row(id); r.Status != "done" || r.Stage != "second" || r.Attempts != 1 ||
			r.Headers["first"] != "onetrip" || r.Headers["second"] != "onetrip" || r.DispatchError != "" {
			t.Errorf("message %d: %+v", id, r)
		}
	}
	p.Check()
	if t.Failed() {
		t.Logf("dispatcher log:\n%s", p.Logs)
	}
}
