package queue_test

import (
	"sync"
	"testing"
	"time"
)

// TestListenerCheckSession: on a direct connection the session check
// passes at once, also for several dispatchers checking side by side, and
// leaves nothing on the session: no probe lock, no LISTEN. (Behind
// PgBouncer in transaction mode it refuses: contrib's TestPgBouncer.)
func TestListenerCheckSession(t *testing.T) {
	t.Parallel()
	_, dsn, ctx := newDB(t)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		l := dial(t, dsn, "pepsi_ingress")
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if err := l.CheckSession(ctx); err != nil {
				t.Errorf("CheckSession: %v", err)
				return
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("CheckSession took %v", el)
			}
			err := l.ExecForTest(ctx, `DO $$ BEGIN
				IF EXISTS (SELECT FROM pg_listening_channels()) THEN RAISE 'still listening'; END IF;
				IF EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) THEN RAISE 'still locked'; END IF;
			END $$`)
			if err != nil {
				t.Errorf("after CheckSession: %v", err)
			}
		}()
	}
	wg.Wait()
}
