package contrib_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// nodeInstall is how to install what the Node package needs, on Debian.
const nodeInstall = "apt-get install -y nodejs npm"

// nodeTools returns node and npm. Unlike the other languages' tools their
// absence fails the test, in CI or not: the package's tests need them.
func nodeTools(t *testing.T) (node, npm string) {
	t.Helper()
	for _, tool := range []struct {
		name string
		path *string
	}{{"node", &node}, {"npm", &npm}} {
		p, err := exec.LookPath(tool.name)
		if err != nil {
			t.Fatalf("%s is not installed (%v); install Node.js and npm: %s", tool.name, err, nodeInstall)
		}
		*tool.path = p
	}
	return node, npm
}

// npmEnv is the environment of the npm commands the tests run: no update
// check, audit or funding requests, nothing asked.
func npmEnv() []string {
	return append(os.Environ(), "npm_config_update_notifier=false", "npm_config_audit=false",
		"npm_config_fund=false", "npm_config_yes=true")
}

// runIn runs a command in dir and returns its output; an error carries the
// command line and the output.
func runIn(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s (in %s): %v\n%s", strings.Join(cmd.Args, " "), dir, err, out)
	}
	return string(out), nil
}

// copyNodeSources copies contrib/node to dir as a fresh checkout has it:
// without node_modules and the tests' build.
func copyNodeSources(dir string) error {
	return filepath.WalkDir("node", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel("node", path)
		if err != nil {
			return err
		}
		if d.IsDir() && (rel == "node_modules" || rel == "build") {
			return filepath.SkipDir
		}
		to := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}

// nodePackage installs the package @pepsi/stage (contrib/node) as a
// developer does, once per test binary: a copy of its sources, npm ci
// (its dependencies from the npm registry, at the versions of the
// committed package-lock.json), and its tests and example stage compiled
// into build/ (npm run build:test). It returns the copy.
func nodePackage(t *testing.T) string {
	t.Helper()
	nodeTools(t)
	return testkit.Make(t, "node-package", func(dir string) error {
		if err := copyNodeSources(dir); err != nil {
			return err
		}
		for _, args := range [][]string{{"ci", "--no-audit", "--no-fund"}, {"run", "--silent", "build:test"}} {
			if _, err := runIn(dir, npmEnv(), "npm", args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// nodeStage is the PROGRAM that runs contrib/node/example/stage.ts, as
// compiled in the installed copy, with node.
func nodeStage(t *testing.T) string {
	t.Helper()
	node, _ := nodeTools(t)
	return node + " " + filepath.Join(nodePackage(t), "build", "example", "stage.js")
}

// TestNodeDist: the committed dist/ is what the build (npm run build: tsc)
// makes of src/, so that npm install needs no build step; after a change
// to src/, run npm run build in contrib/node and commit dist/.
func TestNodeDist(t *testing.T) {
	t.Parallel()
	pkg := nodePackage(t)
	fresh := t.TempDir()
	if _, err := runIn(pkg, npmEnv(), filepath.Join(pkg, "node_modules", ".bin", "tsc"), "-p", "tsconfig.json", "--outDir", fresh); err != nil {
		t.Fatal(err)
	}
	files := func(root string) map[string][]byte {
		m := map[string][]byte{}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			rel, _ := filepath.Rel(root, path)
			m[rel] = b
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	built, committed := files(fresh), files("node/dist")
	var names []string
	for name := range built {
		names = append(names, name)
	}
	for name := range committed {
		if _, ok := built[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		b, inBuild := built[name]
		c, inDist := committed[name]
		switch {
		case !inDist:
			t.Errorf("contrib/node/dist/%s: not committed, but the build makes it", name)
		case !inBuild:
			t.Errorf("contrib/node/dist/%s: committed, but the build does not make it", name)
		case !bytes.Equal(b, c):
			t.Errorf("contrib/node/dist/%s: not what the build makes of src/", name)
		}
	}
	if t.Failed() {
		t.Log("rebuild it: cd contrib/node && npm ci && npm run build; then commit dist/")
	}
}

// TestNodePackage runs the package's own tests (node --test: units, and
// stages under a real `pepsi dispatch`, the binary built from this tree,
// through @pepsi/stage/testing) in the installed copy.
func TestNodePackage(t *testing.T) {
	t.Parallel()
	pkg := nodePackage(t)
	pepsi := testkit.Build(t, "github.com/pepsi-dev/pepsi/cmd/pepsi")
	env := append(npmEnv(), "PEPSI_TEST_DSN="+pgtest.ServerDSN(), "PEPSI_BIN="+pepsi)
	out, err := runIn(pkg, env, "npm", "test", "--silent")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\n# fail 0\n") || !strings.Contains(out, "\n# skipped 0\n") || strings.Contains(out, "\n# pass 0\n") {
		t.Fatalf("the Node tests did not all run and pass:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestNodeInstall follows the README: npm install ./contrib/node, in a
// directory that holds a fresh copy of it (no node_modules, no build),
// installs the package and its dependency pg from the npm registry with no
// build step (dist/ is committed), and both of its entry points load.
func TestNodeInstall(t *testing.T) {
	t.Parallel()
	node, _ := nodeTools(t)
	root := t.TempDir()
	if err := copyNodeSources(filepath.Join(root, "contrib", "node")); err != nil {
		t.Fatal(err)
	}
	// The project npm installs into: root, not a parent with a
	// package.json or node_modules of its own.
	if err := os.WriteFile(filepath.Join(root, "package.json"), []byte(`{"private": true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runIn(root, npmEnv(), "npm", "install", "--no-audit", "--no-fund", "./contrib/node"); err != nil {
		t.Fatal(err)
	}
	const check = `const s = require("@pepsi/stage"), k = require("@pepsi/stage/testing");
		for (const f of [s.run, s.main, s.advance, s.finish, s.pause, s.fail, s.join, k.Pipeline, k.runStage])
			if (typeof f !== "function") throw new Error("missing export");
		console.log(s.statusLine(0, "ok").trim())`
	out, err := runIn(root, npmEnv(), node, "-e", check)
	if err != nil {
		t.Fatal(err)
	}
	if out != "0 # ok\n" {
		t.Fatalf("node -e: %q, want %q", out, "0 # ok\n")
	}
}

// TestNodeReadme: the TypeScript stage of README's "Writing a stage" and
// of contrib/node/README.md is contrib/node/example/readme.ts word for
// word, which the tests' build type-checks (TestNodePackage).
func TestNodeReadme(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("node/example/readme.ts")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{"README.md": readmeBlock(t, "## Writing a stage", "ts")}
	b, err := os.ReadFile("node/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "```ts\n")
	blocks["contrib/node/README.md"], _, _ = strings.Cut(rest, "```")
	for file, block := range blocks {
		if block == "" || !strings.Contains(string(src), block) {
			t.Errorf("%s's TypeScript block is not in contrib/node/example/readme.ts:\n%s", file, block)
		}
	}
}

// dispatcher is a `pepsi dispatch` a test started, its output in the
// site's log.
type dispatcher struct {
	cmd  *exec.Cmd
	done chan error
}

// startDispatch starts the pepsi binary's dispatcher on site; it is killed
// when the test ends if still running.
func startDispatch(t *testing.T, pepsi string, site *testkit.Site) *dispatcher {
	t.Helper()
	cmd := exec.Command(pepsi, "-c", site.Path, "dispatch")
	cmd.Env = append(os.Environ(), "PEPSI_DSN=", "PEPSI_CONFIG=")
	cmd.Stdout, cmd.Stderr = site.Logs, site.Logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &dispatcher{cmd: cmd, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// stop sends the dispatcher SIGTERM and waits for it to exit: its error
// (nil for exit 0) and how long it took.
func (d *dispatcher) stop(t *testing.T) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		return time.Since(start), err
	case <-time.After(2 * time.Minute):
		_ = d.cmd.Process.Kill()
		t.Fatal("pepsi dispatch did not stop within 2 minutes of SIGTERM")
		return 0, nil
	}
}

// TestNodePipeline: a pipeline of three stages in three languages, ts
// (TypeScript, @pepsi/stage: contrib/node/test/stages/behave.ts), py
// (Python, pepsi_stage: contrib/python/tests/stages/behave.py) and go
// (pkg/worker: contrib/go/stage), under a real `pepsi dispatch`. At ts:
// advance, finish, pause, fail, an exception whose work is rolled back, a
// statement queued with the move that fails and takes the pass's work
// with it, a handler that returns its move rather than a promise, a print, a
// terminated session (75: the message goes back uncounted, and the same
// worker connects again), then SIGTERM mid-pass, which lets the pass end
// and commit, and the worker exit long before SHUTDOWN_GRACE. The
// statistics and the rows agree (testkit's CheckInvariants).
func TestNodePipeline(t *testing.T) {
	t.Parallel()
	node, _ := nodeTools(t)
	pkg := nodePackage(t)
	python, _ := pythonVenv(t)
	pyBehave, err := filepath.Abs("python/tests/stages/behave.py")
	if err != nil {
		t.Fatal(err)
	}
	pepsi := testkit.Build(t, "github.com/pepsi-dev/pepsi/cmd/pepsi")
	goStage := testkit.Build(t, "github.com/pepsi-dev/pepsi/contrib/go/stage")
	tsBehave := filepath.Join(pkg, "build", "test", "stages", "behave.js")
	site := testkit.NewSite(t, fmt.Sprintf(`[pepsi-dispatch]
SHUTDOWN_GRACE = 60
SPAWN_COOLDOWN = 1

[stage-ts]
PROGRAM = %s %s --next py
PARALLELISM = 1
QUEUE_LIMIT = 4
RETRIES = 0

[stage-py]
PROGRAM = %s %s --next go
PARALLELISM = 2
QUEUE_LIMIT = 4

[stage-go]
PROGRAM = %s
PARALLELISM = 2
QUEUE_LIMIT = 4
`, node, tsBehave, python, pyBehave, goStage))
	if _, err := site.DB.Pool.Exec(context.Background(), `
		CREATE TABLE test_work (id bigint, stage text, token bigint, pid int);
		CREATE TABLE test_marks (id bigint, what text, pid int)`); err != nil {
		t.Fatal(err)
	}
	d := startDispatch(t, pepsi, site)
	defer func() {
		if t.Failed() {
			t.Logf("dispatcher log:\n%s", site.Logs)
		}
	}()

	payloads := []string{"x:advance", "x:advance", "x:advance", "ts:fail", "ts:raise", "ts:pause",
		"ts:finish", "ts:print", "ts:sync", "ts:kill", "ts:qfail", "x:advance"}
	ids := site.Enqueue("ts", func() [][]byte {
		b := make([][]byte, len(payloads))
		for i, p := range payloads {
			b[i] = []byte(p)
		}
		return b
	}()...)
	site.WaitSettled(2*time.Minute, site.Logs)
	worked := func(id int64, stage string) bool {
		return site.Int64("SELECT count(*) FROM test_work WHERE id = $1 AND stage = $2", id, stage) > 0
	}
	for i, id := range ids {
		r := row(t, site, id)
		switch p := payloads[i]; p {
		case "ts:fail":
			if r.status != "failed" || r.stage != "ts" || r.error != "asked to fail" || r.headers["ts"] != "node" || !worked(id, "ts") {
				t.Errorf("%s (%d): %+v, want failed at ts, asked to fail, its work committed", p, id, r)
			}
		case "ts:raise", "ts:qfail":
			why := map[string]string{"ts:raise": "Error: asked to raise", "ts:qfail": "division by zero"}[p]
			if r.status != "failed" || r.stage != "ts" || !strings.Contains(r.dispatchError, why) {
				t.Errorf("%s (%d): %+v, want failed at ts with %q", p, id, r, why)
			}
			if worked(id, "ts") || r.headers["ts"] != nil {
				t.Errorf("%s (%d): the work of a pass that threw was committed: %+v", p, id, r)
			}
		case "ts:finish":
			if r.status != "done" || r.stage != "ts" || r.headers["ts"] != "node" || !worked(id, "ts") {
				t.Errorf("%s (%d): %+v, want done at ts", p, id, r)
			}
		default:
			want := map[string]any{"ts": "node", "py": "python", "go": "go"}
			if p == "ts:sync" {
				delete(want, "ts") // no work: a move returned at once
			}
			// ts:kill keeps the reason of its answer 75 in dispatch_error.
			if r.status != "done" || r.stage != "go" || (r.dispatchError != "") != (p == "ts:kill") || !sameHeaders(r.headers, want) ||
				worked(id, "ts") != (p != "ts:sync") || !worked(id, "py") {
				t.Errorf("%s (%d): %+v, want done at go with headers %v", p, id, r, want)
			}
		}
	}
	// Ids the dispatcher wrote before it read the hello come bare.
	if n := site.Int64("SELECT count(*) FROM test_work WHERE stage = 'ts' AND token IS NOT NULL"); n == 0 {
		t.Error("no pass at ts had a pass token: no hello?")
	}
	if !strings.Contains(site.Logs.String(), "a print in a handler") {
		t.Error("the handler's console.log is not in the dispatcher's log")
	}
	// The terminated session: the message's next pass made by the same
	// process, connected again.
	kill := ids[slices.Index(payloads, "ts:kill")]
	if n := site.Int64(`SELECT count(*) FROM test_work WHERE id = $1 AND stage = 'ts'
		AND pid = (SELECT min(pid) FROM test_marks WHERE id = $1 AND what = 'killed')`, kill); n != 1 {
		t.Errorf("message %d: its pass after the lost connection was not made by the worker whose session was terminated", kill)
	}
	if n := site.Int64("SELECT count(DISTINCT pid) FROM test_work WHERE stage = 'ts'"); n != 1 {
		t.Errorf("ts passes by %d processes, want 1 (the worker connects again, it does not exit)", n)
	}

	// SIGTERM mid-pass: the pass ends, committed, then the worker exits.
	term := site.Enqueue("ts", []byte("ts:term"))[0]
	site.WaitFor("the ts:term pass under way", time.Minute, func() bool {
		return site.Int64("SELECT count(*) FROM test_marks WHERE id = $1 AND what = 'term'", term) == 1
	}, site.Logs)
	pid := site.Int64("SELECT pid FROM test_marks WHERE id = $1 AND what = 'term'", term)
	took, err := d.stop(t)
	if err != nil {
		t.Errorf("pepsi dispatch: %v", err)
	}
	if took > 30*time.Second {
		t.Errorf("the dispatcher took %v to stop: the ts worker waited for SIGKILL (SHUTDOWN_GRACE 60 s)", took)
	}
	if err := syscall.Kill(int(pid), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the ts worker (pid %d) still runs: %v", pid, err)
	}
	if r := row(t, site, term); r.status != "done" || r.stage != "ts" || !worked(term, "ts") {
		t.Errorf("ts:term (%d): %+v, want done at ts, its work committed: the pass in hand ends on SIGTERM", term, r)
	}
	// The statistics, written by now: ts:kill answered 75 once (not run,
	// not counted, paused a second), ts:pause paused once, no worker
	// crashed.
	if n := site.Int64("SELECT coalesce(sum(paused), 0) FROM pepsi.dispatch_stats"); n != 2 {
		t.Errorf("dispatch_stats.paused = %d, want 2 (ts:pause, and ts:kill's 75)", n)
	}
	if n := site.Int64("SELECT coalesce(sum(not_run), 0) FROM pepsi.stage_stats WHERE stage = 'ts'"); n != 1 {
		t.Errorf("stage_stats.not_run at ts = %d, want 1 (ts:kill)", n)
	}
	if n := site.Int64("SELECT coalesce(sum(crashes), 0) FROM pepsi.stage_stats"); n != 0 {
		t.Errorf("stage_stats.crashes = %d, want 0", n)
	}
	site.Check()
	t.Logf("stopped in %v", took.Round(time.Millisecond))
}

// queueRow is what TestNodePipeline reads of a message.
type queueRow struct {
	status, stage, error, dispatchError string
	headers                             map[string]any
}

func row(t *testing.T, site *testkit.Site, id int64) queueRow {
	t.Helper()
	var r queueRow
	err := site.DB.Pool.QueryRow(context.Background(), `
		SELECT s.status, s.stage, coalesce(s.error, ''), coalesce(s.dispatch_error, ''), m.headers
		  FROM pepsi.state s JOIN pepsi.message m ON m.id = s.id WHERE s.id = $1`, id).
		Scan(&r.status, &r.stage, &r.error, &r.dispatchError, &r.headers)
	if err != nil {
		t.Fatalf("message %d: %v", id, err)
	}
	return r
}

func sameHeaders(got, want map[string]any) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
