package queue

import (
	"io/fs"
	"strconv"
	"strings"
	"testing"

	schema "github.com/pepsi-dev/pepsi/sql"
)

// TestLockKeysDistinct: every advisory-lock key of one form differs from
// the others, tokens never take one of them, and the keys spelled in
// decimal inside SQL are the ones locks.go names.
func TestLockKeysDistinct(t *testing.T) {
	bigint := map[string]int64{
		"dispatcherLock": dispatcherLock,
		"janitorLock":    janitorLock,
		"migrationLock":  migrationLock,
		"standbyLock":    standbyLock,
	}
	seen := map[int64]string{}
	for name, k := range bigint {
		if other, ok := seen[k]; ok {
			t.Errorf("%s and %s are the same key %#x", name, other, k)
		}
		seen[k] = name
		if k>>48 != 0 {
			t.Errorf("%s %#x has bits in the range NewToken draws from", name, k)
		}
	}
	if classes := map[int64]bool{stageLockClass: true, fenceLockClass: true, standbyLockClass: true}; len(classes) != 3 {
		t.Errorf("stageLockClass, fenceLockClass and standbyLockClass are not three classes")
	}
	for range 1000 {
		if tok := NewToken(); seen[tok] != "" {
			t.Fatalf("NewToken returned %s's key", seen[tok])
		}
	}

	if want := "(" + strconv.Itoa(stageLockClass) + ","; !strings.Contains(freeStage, want) {
		t.Errorf("freeStage does not spell stageLockClass as %q: %s", want, freeStage)
	}
	body, err := fs.ReadFile(schema.Functions, "functions/20_fence.sql")
	if err != nil {
		t.Fatal(err)
	}
	if want := "pg_advisory_xact_lock_shared(" + strconv.Itoa(fenceLockClass) + ","; !strings.Contains(string(body), want) {
		t.Errorf("pepsi.fence does not spell fenceLockClass as %q", want)
	}
}
