package testkit

import (
	"os/exec"
	"strings"
	"testing"
)

// Module is this module's import path.
const Module = "github.com/pepsi-dev/pepsi"

// Deps lists the packages of this module that pkg (an import path)
// depends on, directly or not, itself left out: what go list -deps finds
// for its build, tests aside.
func Deps(t testing.TB, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("testkit: go list -deps %s: %v\n%s", pkg, err, msg)
	}
	var deps []string
	for _, p := range strings.Fields(string(out)) {
		if p != pkg && (p == Module || strings.HasPrefix(p, Module+"/")) {
			deps = append(deps, p)
		}
	}
	return deps
}
