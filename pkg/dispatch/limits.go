package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// poolConns is the size of the dispatcher's pool: the claim and settle
// lanes, the chore lane, and the janitor's retention and vacuum
// services.
const poolConns = 5

// ownConns is how many sessions the dispatcher opens itself: the listener,
// the pool and, with METRICS_LISTEN, the metrics' one.
func ownConns(cfg *config.Config) int {
	n := 1 + poolConns
	if cfg.Dispatch.MetricsListen != "" {
		n++
	}
	return n
}

// checkLimits refuses a configuration whose workers cannot all connect:
// it is checked at start, on lis, before the lock is waited for.
func (d *Dispatcher) checkLimits(ctx context.Context, lis LockSession) error {
	limit, err := lis.ConnectionLimit(ctx)
	if err != nil {
		return fmt.Errorf("read the server's connection limit: %w", err)
	}
	return checkConnections(d.cfg, ownConns(d.cfg), limit)
}

// listedStages is how many stages a connection error names before it
// says how many more there are.
const listedStages = 5

// checkConnections returns a configuration error (exit 2) when the workers
// the stages' PARALLELISM allows, one session each as the worker protocol
// has it, and own sessions of the dispatcher's add up to more than the
// server lets ordinary roles open. Sessions that others hold are not
// counted: they come and go, and the check must say the same every time.
// With WORKER_DSN set there is nothing to check: the workers connect
// through it, a pooler as a rule, whose pool is what they take of the
// server.
func checkConnections(cfg *config.Config, own int, limit queue.ConnLimit) error {
	if cfg.WorkerDSN != "" {
		return nil
	}
	workers := 0
	for _, s := range cfg.Stages {
		workers += s.Parallelism
	}
	if workers+own <= limit.Available() {
		return nil
	}
	stages := slices.Clone(cfg.Stages)
	slices.SortStableFunc(stages, func(a, b config.Stage) int { return cmp.Compare(b.Parallelism, a.Parallelism) })
	var named []string
	for i, s := range stages {
		if i == listedStages {
			named = append(named, fmt.Sprintf("%d more", len(stages)-i))
			break
		}
		named = append(named, fmt.Sprintf("[stage-%s] %d", s.Name, s.Parallelism))
	}
	server := fmt.Sprintf("max_connections %d - superuser_reserved_connections %d", limit.MaxConnections, limit.SuperuserReserved)
	if limit.Reserved > 0 {
		server += fmt.Sprintf(" - reserved_connections %d", limit.Reserved)
	}
	return &config.Error{File: nameOf(cfg), Msg: fmt.Sprintf(
		"PARALLELISM allows %d workers (%s), a database connection each, and the dispatcher opens %d of its own: "+
			"%d connections, more than the server allows (%d: %s); lower PARALLELISM or raise max_connections",
		workers, strings.Join(named, ", "), own, workers+own, limit.Available(), server)}
}
