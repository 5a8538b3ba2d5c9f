package dispatch

import (
	"context"
	"sync"
)

// service is one part of the janitor's work (retention, vacuum, the
// schedules): between Start and Stop it runs on a goroutine of its own,
// with its own timer and its own connection, and shares nothing with the
// loop but a channel (nosession_test.go).
type service interface {
	// Start starts the service's goroutine; it does nothing if it runs.
	Start(ctx context.Context) error
	// Stop ends the goroutine and waits for it; it may be called twice,
	// or before Start.
	Stop()
}

// startStop is what the services share: their goroutine and what stops it.
type startStop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine returns; nil: none runs
}

// start runs fn on a new goroutine, unless one runs. fn's stop ends with
// Stop or with ctx, its ctx with ctx only: work that a Stop lets finish
// runs under ctx, which the dispatcher cancels when it gives up on the
// database.
func (s *startStop) start(ctx context.Context, fn func(ctx, stop context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return
	}
	stop, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.cancel, s.done = cancel, done
	go func() {
		defer close(done)
		fn(ctx, stop)
	}()
}

// Stop cancels the goroutine's stop and waits for it to return.
func (s *startStop) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		return
	}
	s.cancel()
	<-s.done
	s.cancel, s.done = nil, nil
}
