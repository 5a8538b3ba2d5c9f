package app

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestQueueLsSearch: ls --header (every one given, a value with commas
// whole), --payload (UTF-8 text payloads only) and --since (a day when a
// search gives none); a bad value is one line naming the flag, exit 2.
func TestQueueLsSearch(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	ctx := context.Background()
	enqueue := func(headers map[string]string, payload string) int64 {
		t.Helper()
		id, err := queue.Enqueue(ctx, db.Pool, "parse", []byte(payload), headers)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Admit(ctx); err != nil {
			t.Fatal(err)
		}
		return id
	}
	old := enqueue(map[string]string{"tenant": "acme"}, "order 7")
	acme := enqueue(map[string]string{"tenant": "acme", "tags": "a,b"}, "order 7 é")
	other := enqueue(map[string]string{"tenant": "other"}, "order 8")
	binary := enqueue(map[string]string{"tenant": "acme"}, "order 7\xff")
	sqlExec(t, db, "UPDATE pepsi.message SET created_at = now() - interval '2 days' WHERE id = $1", old)

	for _, tc := range []struct {
		args []string
		want []int64
	}{
		{[]string{"--header", "tenant=acme"}, []int64{acme, binary}},
		{[]string{"--header", "tenant=acme", "--since", "3d"}, []int64{old, acme, binary}},
		{[]string{"--header", "tenant=acme", "--header", "tags=a,b"}, []int64{acme}},
		{[]string{"--payload", "order 7"}, []int64{acme}},
		{[]string{"--payload", "é", "--since", "90m"}, []int64{acme}},
		{[]string{"--since", "1h"}, []int64{acme, other, binary}},
		{[]string{"--payload", "order", "--status", "pending", "--limit", "2"}, []int64{acme, other}},
		{[]string{"--header", "tenant=nobody"}, nil},
	} {
		if got := lsIDs(t, tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("ls --json %q = %v, want %v", tc.args, got, tc.want)
		}
	}

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--header", "foo"}, `pepsi queue ls: --header "foo": want KEY=VALUE`},
		{[]string{"--header", "=v"}, `pepsi queue ls: --header "=v": want KEY=VALUE`},
		{[]string{"--since", "-5m"}, `pepsi queue ls: --since "-5m": want seconds or a duration such as 90m, 36h or 7d`},
		{[]string{"--since", "0"}, `pepsi queue ls: --since "0": want a duration of more than 0`},
		{[]string{"--payload", ""}, `pepsi queue ls: --payload is empty`},
	} {
		r := pepsi(t, "", append([]string{"queue", "ls"}, tc.args...)...)
		r.wantCode(t, 2)
		if first, _, _ := strings.Cut(r.stderr, "\n"); first != tc.says || r.stdout != "" {
			t.Errorf("ls %q: stderr %q, want the line %q", tc.args, r.stderr, tc.says)
		}
	}
}

// lsIDs runs pepsi queue ls --json with args and returns the ids listed.
func lsIDs(t *testing.T, args ...string) []int64 {
	t.Helper()
	r := pepsi(t, "", append([]string{"queue", "ls", "--json"}, args...)...)
	r.wantCode(t, 0)
	var ids []int64
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if line == "" {
			continue
		}
		var row admin.Row
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("ls %q: line %q: %v", args, line, err)
		}
		ids = append(ids, row.ID)
	}
	return ids
}
