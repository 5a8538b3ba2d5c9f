package app

import (
	"context"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestEnqueueTraceparent: --traceparent, or $TRACEPARENT, becomes the
// messages' traceparent header (with --tracestate, their tracestate); a
// malformed one is a usage error that names it.
func TestEnqueueTraceparent(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	headers := func(id int64) map[string]string {
		var h map[string]string
		if err := db.Pool.QueryRow(context.Background(), "SELECT headers FROM pepsi.message WHERE id = $1", id).Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	r := pepsi(t, "x", "enqueue", "--stage", "parse", "--traceparent", tp, "--tracestate", "k=v", "-H", "a=b", "-")
	r.wantCode(t, 0)
	if h := headers(ids(t, r.stdout)[0]); h["traceparent"] != tp || h["tracestate"] != "k=v" || h["a"] != "b" || len(h) != 3 {
		t.Errorf("with --traceparent: headers %v", h)
	}
	t.Setenv("TRACEPARENT", tp)
	r = pepsi(t, "x", "enqueue", "--stage", "parse", "-")
	r.wantCode(t, 0)
	if h := headers(ids(t, r.stdout)[0]); h["traceparent"] != tp || len(h) != 1 {
		t.Errorf("with $TRACEPARENT: headers %v", h)
	}
	t.Setenv("TRACEPARENT", "00-xyz")
	pepsi(t, "x", "enqueue", "--stage", "parse", "-").wantOneError(t,
		`pepsi enqueue: --traceparent (or $TRACEPARENT) "00-xyz": not a W3C traceparent (VERSION-TRACEID-SPANID-FLAGS, such as 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01)`)
	t.Setenv("TRACEPARENT", "")
	pepsi(t, "x", "enqueue", "--stage", "parse", "--traceparent", tp, "-H", "traceparent=x", "-").wantOneError(t,
		"pepsi enqueue: --traceparent and --header traceparent= both given")
}
