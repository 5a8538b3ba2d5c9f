package peers

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// passCost is what a real-work run spent, from a mark taken after the
// warm-up to the last message done: the CPU of the pepsi side (the
// dispatcher and its stage programs) and of the server (the backends of
// the run's database), and the WAL the cluster wrote meanwhile (every
// database's: only a quiet server makes it the run's).
type passCost struct {
	pepsi, server time.Duration
	walBytes      int64
	walRecords    int64
}

// costMark is a passCost's starting point.
type costMark struct {
	tree    time.Duration
	lsn     string
	records int64
	backend *backendSampler
}

// markCost reads the counters passCost is the difference of: the CPU of
// the process tree under root (with the children it has reaped: the
// workers MAX_MESSAGES replaces), the WAL of the cluster, and starts
// following the CPU of the backends of conn's database.
func markCost(ctx context.Context, conn *pgx.Conn, dsn string, root int) (costMark, error) {
	m := costMark{tree: treeCPU(root)}
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text, wal_records FROM pg_stat_wal`).Scan(&m.lsn, &m.records); err != nil {
		return m, err
	}
	var self int32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&self); err != nil {
		return m, err
	}
	var err error
	m.backend, err = startBackendSampler(ctx, dsn, self)
	return m, err
}

// since is the cost from m to now; it stops m's sampler.
func (m costMark) since(ctx context.Context, conn *pgx.Conn, root int) (passCost, error) {
	c := passCost{pepsi: treeCPU(root) - m.tree, server: m.backend.stop()}
	var lsn string
	var records int64
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text, wal_records FROM pg_stat_wal`).Scan(&lsn, &records); err != nil {
		return c, err
	}
	c.walRecords = records - m.records
	err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, lsn, m.lsn).Scan(&c.walBytes)
	return c, err
}

// backendSampler follows the CPU of a database's client backends: every
// 50 ms it reads each one's from /proc, so that one that ends (its worker
// replaced after MAX_MESSAGES) is counted up to its last reading.
type backendSampler struct {
	conn  *pgx.Conn
	skip  []int32 // the bench's own backends
	first map[int32]time.Duration
	last  map[int32]time.Duration
	quit  chan struct{}
	done  chan struct{}
}

func startBackendSampler(ctx context.Context, dsn string, skip ...int32) (*backendSampler, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	var self int32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&self); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	b := &backendSampler{conn: conn, skip: append(skip, self), first: map[int32]time.Duration{}, last: map[int32]time.Duration{},
		quit: make(chan struct{}), done: make(chan struct{})}
	b.sample(ctx, true)
	go func() {
		defer close(b.done)
		for {
			select {
			case <-b.quit:
				b.sample(ctx, false)
				return
			case <-time.After(50 * time.Millisecond):
				b.sample(ctx, false)
			}
		}
	}()
	return b, nil
}

func (b *backendSampler) sample(ctx context.Context, first bool) {
	rows, err := b.conn.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> ALL ($1)`, b.skip)
	if err != nil {
		return
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return
	}
	for _, pid := range pids {
		d, err := procCPU(int(pid))
		if err != nil {
			continue
		}
		if _, seen := b.last[pid]; !seen && first {
			b.first[pid] = d
		}
		b.last[pid] = d
	}
}

// stop ends the sampling and returns the CPU the backends used since it
// started (all of it for a backend that started since).
func (b *backendSampler) stop() time.Duration {
	close(b.quit)
	<-b.done
	b.conn.Close(context.Background())
	var d time.Duration
	for pid, t := range b.last {
		d += t - b.first[pid]
	}
	return d
}

// treeCPU is the CPU time of root and every process below it, with the
// children they have reaped.
func treeCPU(root int) time.Duration {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if f := strings.Fields(s[i+1:]); i >= 0 && len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	var sum time.Duration
	for pid := range parent {
		for p := pid; p > 1; p = parent[p] {
			if p == root {
				sum += procTreeCPU(pid)
				break
			}
		}
	}
	return sum
}

// procTreeCPU is a process's CPU time and its reaped children's
// (utime, stime, cutime and cstime of /proc/PID/stat).
func procTreeCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, k := range f[11:15] {
		n, _ := strconv.ParseInt(k, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// rowVersions counts the row versions written into pepsi.state's
// partitions since the database was made (its statistics: read them once
// the backends that wrote are gone, which is when they have reported).
func rowVersions(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, `SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0)::bigint FROM pg_stat_user_tables
		WHERE schemaname = 'pepsi' AND relid IN (SELECT relid FROM pg_partition_tree('pepsi.state'))`).Scan(&n)
	return n, err
}
