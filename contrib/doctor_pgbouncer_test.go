package contrib_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestDoctorPgBouncer: pepsi doctor's pooler check (admin.CheckPooler)
// through a real PgBouncer in transaction mode finds a pooler (its cancel
// key is PgBouncer's) and the dispatcher's session check refusing it; the
// direct connection is pkg/admin's TestDoctorPooler. It lives here beside
// TestPgBouncer, whose PgBouncer it starts.
func TestDoctorPgBouncer(t *testing.T) {
	b := startPgBouncer(t)
	_, dsn := pgtest.New(t)
	defer b.stop() // before the test database is dropped, with its server connections
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := admin.CheckPooler(ctx, b.dsn(dsn))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Pooled || !errors.Is(p.NoSession, queue.ErrNoSession) {
		t.Errorf("through PgBouncer in transaction mode: %+v (%v), want pooled and refused", p, p.NoSession)
	}
	t.Logf("refused: %v", p.NoSession)
}
