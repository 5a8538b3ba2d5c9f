package contrib_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMakeTestProgress: make test (on one small package) says the name of
// each check as it starts, and which packages go test runs, in order; and
// .ci/run installs staticcheck, at the Makefile's version, before make
// test, which would otherwise fetch it half-way through.
func TestMakeTestProgress(t *testing.T) {
	t.Parallel()
	need(t, "make", "apt-get install -y make", "make", "--version")
	cmd := exec.Command("make", "--no-print-directory", "test", "PKGS=./pkg/protocol/")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make test PKGS=./pkg/protocol/: %v\n%s", err, out)
	}
	rest := string(out)
	for _, step := range []string{"==> gofmt\n", "==> go vet\n", "==> staticcheck\n", "==> man pages\n",
		"==> go test ", "packages: 1;", "\n    pkg/protocol", "\nok  \tgithub.com/pepsi-dev/pepsi/pkg/protocol\t"} {
		i := strings.Index(rest, step)
		if i < 0 {
			t.Fatalf("make test does not print %q (in this order):\n%s", step, out)
		}
		rest = rest[i+len(step):]
	}

	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	install := strings.Index(string(ci), `go install "honnef.co/go/tools/cmd/staticcheck@$sc_version"`)
	run := strings.Index(string(ci), "\nexec make test\n")
	if install < 0 || run < 0 || install > run {
		t.Errorf(".ci/run does not go install staticcheck before make test (at %d, make test at %d)", install, run)
	}
	if !strings.Contains(string(ci), `sc_version=$(sed -n 's/^STATICCHECK_VERSION ?= *//p' Makefile)`) {
		t.Error(".ci/run does not take staticcheck's version from the Makefile")
	}
}
