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
// decimal inside SQL are the ones locks.go names (pkg/admin's freeStage:
// its TestFreeStageKey).
func TestLockKeysDistinct(t *testing.T) {
	bigint := map[string]int64{
		"DispatcherLock": DispatcherLock,
		"janitorLock":    janitorLock,
		"migrationLock":  migrationLock,
		"StandbyLock":    StandbyLock,
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
	if classes := map[int64]bool{StageLockClass: true, fenceLockClass: true, StandbyLockClass: true}; len(classes) != 3 {
		t.Errorf("StageLockClass, fenceLockClass and StandbyLockClass are not three classes")
	}
	for range 1000 {
		if tok := NewToken(); seen[tok] != "" {
			t.Fatalf("NewToken returned %s's key", seen[tok])
		}
	}

	body, err := fs.ReadFile(schema.Functions, "functions/20_fence.sql")
	if err != nil {
		t.Fatal(err)
	}
	if want := "pg_advisory_xact_lock_shared(" + strconv.Itoa(fenceLockClass) + ","; !strings.Contains(string(body), want) {
		t.Errorf("pepsi.fence does not spell fenceLockClass as %q", want)
	}
}
