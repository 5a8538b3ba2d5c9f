package peers

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// withDatabase returns dsn (a postgres:// URL or key=value pairs) with its
// database replaced by name.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("DSN: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// key=value: a later dbname wins.
	return strings.TrimSpace(dsn) + " dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name) + "'", nil
}

// recreateDatabase drops the database name if it exists (ending its
// sessions) and creates it, on the server of dsn.
func recreateDatabase(ctx context.Context, dsn, name string) error {
	if err := dropDatabase(ctx, dsn, name); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

func dropDatabase(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// serverInfo is what the run ran on.
type serverInfo struct {
	Version, SynchronousCommit, Fsync, Autovacuum string
	MaxConnections                                int
}

func readServerInfo(ctx context.Context, dsn string) (serverInfo, error) {
	var s serverInfo
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return s, err
	}
	defer conn.Close(context.Background())
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit'),
		current_setting('fsync'), current_setting('autovacuum'), current_setting('max_connections')::int`).
		Scan(&s.Version, &s.SynchronousCommit, &s.Fsync, &s.Autovacuum, &s.MaxConnections)
	return s, err
}

// backendCPU sums the CPU time (user + system, from /proc) of the client
// backends connected to the current database of conn, by pid. It needs
// the server on this machine; without /proc access it returns nil.
func backendCPU(ctx context.Context, conn interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[int]time.Duration, error) {
	rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'")
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		if d, err := procCPU(int(pid)); err == nil {
			out[int(pid)] = d
		}
	}
	return out, nil
}

// cpuSince is the CPU the backends of now used since then (all of it for a
// backend that started in between).
func cpuSince(then, now map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range now {
		d += t - then[pid]
	}
	return d
}

// procCPU is a process's user + system CPU time, from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	// After the command: state(0) ... utime(11) stime(12), in clock ticks
	// (100 a second on Linux).
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad times", pid)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// loadAvg is the one-minute load average, 0 if unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
