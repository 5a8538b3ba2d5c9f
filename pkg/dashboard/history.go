package dashboard

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The charts' history survives a restart: the sampler writes one sample
// a bar to pepsi.throughput (admin.SaveThroughput) and, when the server
// starts, reads the last window's back (admin.Throughput) before its
// first sample. A database that cannot keep them (an older schema, a role
// that may not write) costs the charts their history only: it is logged
// once, and the charts work from memory as before.

// historyKeep is how long pepsi.throughput keeps a sample at least.
const historyKeep = time.Hour

// history is the sampler's part in the database.
type history struct {
	saved    time.Time // when a sample was last written
	restored bool      // the database's samples were read back
}

// keep writes the sample stages of at when a bar's width has passed since
// the last one written (a sample without statistics is not written).
func (s *sampler) keep(ctx context.Context, db *admin.DB, at time.Time, stages []queue.StageStats) error {
	s.mu.Lock()
	due := len(stages) > 0 && at.Sub(s.history.saved) >= s.window/chartBins
	s.mu.Unlock()
	if !due {
		return nil
	}
	if err := db.SaveThroughput(ctx, at, stages, max(historyKeep, 2*s.window)); err != nil {
		return err
	}
	s.mu.Lock()
	s.history.saved = at
	s.mu.Unlock()
	return nil
}

// restore reads back, once, the samples the database has of the window
// ending at now (and the one bar before it, which bounds its first).
func (s *sampler) restore(ctx context.Context, db *admin.DB, now time.Time) error {
	s.mu.Lock()
	done := s.history.restored
	s.mu.Unlock()
	if done {
		return nil
	}
	got, err := db.Throughput(ctx, now.Add(-s.window-2*s.window/chartBins))
	if err != nil {
		return err
	}
	for _, x := range got {
		s.add(x.At, x.Stages)
	}
	s.mu.Lock()
	s.history.restored = true
	s.mu.Unlock()
	return nil
}
