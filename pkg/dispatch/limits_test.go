package dispatch

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestCheckConnections: the stages' PARALLELISM plus the dispatcher's own
// sessions must fit in what the server allows; the error names the file,
// the stages and the numbers, and is a configuration error.
func TestCheckConnections(t *testing.T) {
	pg15 := queue.ConnLimit{MaxConnections: 100, SuperuserReserved: 3}
	pg16 := queue.ConnLimit{MaxConnections: 100, SuperuserReserved: 3, Reserved: 7}
	stages := func(par ...int) []config.Stage {
		var out []config.Stage
		for i, p := range par {
			out = append(out, config.Stage{Name: fmt.Sprintf("s%d", i+1), Parallelism: p})
		}
		return out
	}
	for _, c := range []struct {
		name    string
		stages  []config.Stage
		metrics bool
		limit   queue.ConnLimit
		want    string // "" for no error
	}{
		{"defaults", stages(4, 4, 4), false, pg15, ""},
		{"exactly full", stages(91), false, pg15, ""}, // 91 + 6 = 97
		{"one over", stages(92), false, pg15,
			"/etc/pepsi/pepsi.conf: PARALLELISM allows 92 workers ([stage-s1] 92), a database connection each, and the dispatcher opens 6 of its own: " +
				"98 connections, more than the server allows (97: max_connections 100 - superuser_reserved_connections 3); lower PARALLELISM or raise max_connections"},
		{"the metrics' session counts", stages(91), true, pg15, "opens 7 of its own: 98 connections"},
		{"reserved_connections counts", stages(85), false, pg16, "(90: max_connections 100 - superuser_reserved_connections 3 - reserved_connections 7)"},
		{"the issue's", stages(100000, 4), false, pg15, "PARALLELISM allows 100004 workers ([stage-s1] 100000, [stage-s2] 4)"},
		{"largest first, the rest counted", stages(1, 2, 30, 4, 50, 6, 7), false, pg15,
			"PARALLELISM allows 100 workers ([stage-s5] 50, [stage-s3] 30, [stage-s7] 7, [stage-s6] 6, [stage-s4] 4, 2 more)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := &config.Config{Path: "/etc/pepsi/pepsi.conf", Stages: c.stages}
			if c.metrics {
				cfg.Dispatch.MetricsListen = ":9187"
			}
			err := checkConnections(cfg, ownConns(cfg), c.limit)
			if c.want == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			var ce *config.Error
			if err == nil || !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *config.Error", err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "/etc/pepsi/pepsi.conf: ") {
				t.Errorf("error\n%s\nwant it to contain\n%s", err, c.want)
			}
		})
	}
}

// TestCheckConnectionsWorkerDSN: workers that connect through WORKER_DSN
// (a pooler) are not counted against the server's limit.
func TestCheckConnectionsWorkerDSN(t *testing.T) {
	cfg := &config.Config{Path: "/etc/pepsi/pepsi.conf", WorkerDSN: "port=6432",
		Stages: []config.Stage{{Name: "a", Parallelism: 500}, {Name: "b", Parallelism: 500}}}
	if err := checkConnections(cfg, ownConns(cfg), queue.ConnLimit{MaxConnections: 100, SuperuserReserved: 3}); err != nil {
		t.Errorf("with WORKER_DSN: %v, want no error", err)
	}
}
