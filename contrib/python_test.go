package contrib_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// pythonInstall is how to install what the Python package needs, on Debian.
const pythonInstall = "apt-get install -y python3-psycopg2 python3-pip python3-venv"

// pythonVenv installs the package pepsi-stage (contrib/python) as its
// README says, once per test binary: a copy of its sources, a virtualenv
// that sees the distribution's packages (psycopg2, pip, setuptools), and
// pip install --no-build-isolation --no-index, without PyPI. It returns the
// virtualenv's python and the copy of the sources.
func pythonVenv(t *testing.T) (python, src string) {
	t.Helper()
	need(t, "Debian's python3 with psycopg2, pip and venv", pythonInstall,
		"/usr/bin/python3", "-c", "import setuptools, psycopg2, pip, venv")
	dir := testkit.Make(t, "python-venv", func(dir string) error {
		if err := os.CopyFS(filepath.Join(dir, "src"), os.DirFS("python")); err != nil {
			return err
		}
		venv := filepath.Join(dir, "venv")
		for _, args := range [][]string{
			{"/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip", venv},
			{filepath.Join(venv, "bin", "python"), "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-index",
				filepath.Join(dir, "src")},
		} {
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PIP_DISABLE_PIP_VERSION_CHECK=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		return nil
	})
	return filepath.Join(dir, "venv", "bin", "python"), filepath.Join(dir, "src")
}

// pythonStage is the PROGRAM that runs contrib/python/stage.py with the
// virtualenv's python.
func pythonStage(t *testing.T) string {
	t.Helper()
	py, _ := pythonVenv(t)
	abs, err := filepath.Abs("python/stage.py")
	if err != nil {
		t.Fatal(err)
	}
	return py + " " + abs
}

// TestPythonPackage runs the package's own tests (contrib/python/tests,
// unittest) with the package installed in a fresh virtualenv: its stages
// under a real pepsi dispatcher (the binary built from this tree) beside
// contrib/go/stage, on the test server. They fail, never skip, when
// something is missing.
func TestPythonPackage(t *testing.T) {
	t.Parallel()
	py, src := pythonVenv(t)
	pepsi := testkit.Build(t, "github.com/pepsi-dev/pepsi/cmd/pepsi")
	goStage := testkit.Build(t, "github.com/pepsi-dev/pepsi/contrib/go/stage")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = src // the tests of the copy; pepsi_stage comes from the virtualenv (src/ is not on its path)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PEPSI_TEST_DSN="+pgtest.ServerDSN(),
		"PEPSI_BIN="+pepsi, "PEPSI_GO_STAGE="+goStage)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	if !strings.Contains(string(out), "\nOK") || strings.Contains(string(out), "skipped") {
		t.Fatalf("the Python tests did not all run and pass:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestPythonTypes: mypy --strict passes over the package, its tests and
// the example stages (the package ships py.typed).
func TestPythonTypes(t *testing.T) {
	t.Parallel()
	need(t, "mypy", "apt-get install -y mypy", "mypy", "--version")
	need(t, "Debian's python3 with psycopg2", pythonInstall, "/usr/bin/python3", "-c", "import psycopg2")
	need(t, "psycopg2's types (typeshed)", "apt-get install -y python3-typeshed",
		"/usr/bin/python3", "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('psycopg2-stubs') is None)")
	if _, err := os.Stat("python/src/pepsi_stage/py.typed"); err != nil {
		t.Errorf("the package ships no py.typed: %v", err)
	}
	cmd := exec.Command("mypy", "--strict", "--cache-dir", t.TempDir(), "src", "tests", "stage.py", "invoice.py")
	cmd.Dir = "python"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}
