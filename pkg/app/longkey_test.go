package app

import (
	"context"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestQueueLongKey: a message enqueued with a KEY header far longer than
// an index entry may be is admitted (keyed by the value's hash), so that
// pepsi queue and pepsi stats, which admit first, keep working.
func TestQueueLongKey(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "[stage-k]\nPROGRAM = /bin/true\nKEY = header:acct\n")
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, "INSERT INTO pepsi.flow_keys (stage, header, key_limit) VALUES ('k', 'acct', 1)"); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("eyJhbGciOiJSUzI1NiJ9.", 400)
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.enqueue('k', '', jsonb_build_object('acct', $1::text)) FROM generate_series(1, 3)", long); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"queue", "summary"}, {"queue", "ls"}, {"stats"}} {
		pepsi(t, "", args...).wantCode(t, 0)
	}
	if n := queryInt(t, dsn, "SELECT count(DISTINCT flow_key) FROM pepsi.state WHERE stage = 'k' AND flow_key LIKE 'md5:%'"); n != 1 {
		t.Errorf("%d distinct hashed keys for three messages of one long key, want 1", n)
	}
}
