package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// builds are the programs Build made, in one temporary directory that Main
// removes.
var builds struct {
	sync.Mutex
	main  bool // Main runs the tests, and so removes dir at the end
	dir   string
	byKey map[string]*build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Main runs the tests of a package that uses Build or Worker, removes what
// they built, and exits: call it from TestMain.
func Main(m *testing.M) {
	builds.Lock()
	builds.main = true
	builds.Unlock()
	code := m.Run()
	builds.Lock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	builds.Unlock()
	os.Exit(code)
}

// Build builds the main package pkg (an import path) with go build and
// flags, once per test binary however many tests ask (a failed build fails
// each of them), and returns the program's path; its file name is pkg's
// last element.
func Build(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	b, err := lookup(pkg, flags)
	if err != nil {
		t.Fatalf("testkit: build %s: %v", pkg, err)
	}
	b.once.Do(func() {
		if b.err = os.MkdirAll(filepath.Dir(b.path), 0o755); b.err != nil {
			return
		}
		args := append(append([]string{"build", "-o", b.path}, flags...), pkg)
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("testkit: build %s: %v", pkg, b.err)
	}
	return b.path
}

// Make makes something other than a Go program (a Python virtualenv,
// say) once per test binary, however many tests ask, in a directory of its
// own that Main removes, and returns that directory. name tells one from
// another; a failure of make fails each test that asks.
func Make(t testing.TB, name string, make func(dir string) error) string {
	t.Helper()
	b, err := lookup("make:"+name, nil)
	if err != nil {
		t.Fatalf("testkit: make %s: %v", name, err)
	}
	dir := filepath.Dir(b.path)
	b.once.Do(func() {
		if b.err = os.MkdirAll(dir, 0o755); b.err == nil {
			b.err = make(dir)
		}
	})
	if b.err != nil {
		t.Fatalf("testkit: make %s: %v", name, b.err)
	}
	return dir
}

// lookup returns the build of pkg with flags, new if it is the first ask.
func lookup(pkg string, flags []string) (*build, error) {
	builds.Lock()
	defer builds.Unlock()
	if !builds.main {
		return nil, fmt.Errorf("the package's TestMain must run its tests with testkit.Main, which removes the builds")
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "pepsi-test-build-")
		if err != nil {
			return nil, err
		}
		builds.dir, builds.byKey = dir, make(map[string]*build)
	}
	key := strings.Join(append([]string{pkg}, flags...), "\x00")
	b := builds.byKey[key]
	if b == nil {
		// A directory per build: two packages may end in the same name.
		b = &build{path: filepath.Join(builds.dir, strconv.Itoa(len(builds.byKey)), path.Base(pkg))}
		builds.byKey[key] = b
	}
	return b, nil
}

// WorkerName is the file name of the test worker, as it shows in a process's
// command line.
const WorkerName = "testworker"

// Worker builds the test stage program (internal/testworker: each message's
// payload says what it does) once per test binary and returns its path. A
// database it runs on needs its tables: see Site.WorkerTables.
func Worker(t testing.TB) string {
	t.Helper()
	return Build(t, "github.com/pepsi-dev/pepsi/internal/"+WorkerName)
}

// workerTables are where the test worker records each committed pass and
// each start.
const workerTables = `
	CREATE TABLE test_passes (id bigint, stage text, pid int, at timestamptz DEFAULT clock_timestamp());
	CREATE TABLE test_workers (pid int, stage text, args text, config text);
	CREATE TABLE test_joins (id bigint, children bigint, results bigint, failed bigint, cancelled bigint,
	                         at timestamptz DEFAULT clock_timestamp())`

// createWorkerTables creates the test worker's tables on pool.
func createWorkerTables(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), workerTables); err != nil {
		t.Fatalf("testkit: the test worker's tables: %v", err)
	}
}
