package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// ingressFresh measures what a new user measures first: pepsi.enqueue()
// against the plain INSERT on a database just migrated, where no
// dispatcher has ever run. It uses a database of its own (the bench's has
// seen dispatchers by now), dropped afterwards.
func (b *bench) ingressFresh(ctx context.Context, pgbench string, secs int) (map[int][2]ingressSide, error) {
	name := b.o.Database + "_fresh"
	if err := pgadmin.Recreate(ctx, b.o.DSN, name); err != nil {
		return nil, fmt.Errorf("ingress: create database %s: %w", name, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = pgadmin.Drop(dctx, b.o.DSN, name)
	}()
	dsn := pgadmin.WithDatabase(b.o.DSN, name)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if _, err := queue.Migrate(ctx, conn); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA bench;"+ingressSchema); err != nil {
		return nil, fmt.Errorf("ingress: its tables: %w", err)
	}
	return b.ingressIdle(ctx, conn, dsn, pgbench, secs, "new database", "fresh")
}

// ingressAfter measures pepsi.enqueue() against the plain INSERT on the
// bench's database once its dispatcher has stopped: a database where
// dispatchers have run, and none runs now.
func (b *bench) ingressAfter(ctx context.Context, pgbench string, secs int) (map[int][2]ingressSide, error) {
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	return b.ingressIdle(ctx, conn, b.dsn, pgbench, secs, "after a dispatcher ran", "after")
}

// ingressIdle runs the plain and the pepsi.enqueue() transaction
// alternately on database dsn (conn), where no dispatcher runs, so that
// the messages wait in pepsi.ingress, and checks that the wake flag read
// as not armed: the producers did not notify.
func (b *bench) ingressIdle(ctx context.Context, conn *pgx.Conn, dsn, pgbench string, secs int, what, file string) (map[int][2]ingressSide, error) {
	scripts := [2]string{b.path(file + "-plain.sql"), b.path(file + "-pepsi.sql")}
	for i, path := range scripts {
		if err := os.WriteFile(path, []byte(ingressScript(ingressHeld, i == 1)), 0o644); err != nil {
			return nil, err
		}
	}
	out := map[int][2]ingressSide{}
	for _, clients := range ingressClients {
		var sides [2]ingressSide
		for i := range b.o.IngressRuns {
			for k, script := range scripts {
				if _, err := conn.Exec(ctx, "TRUNCATE bench.app, bench.outbox, pepsi.ingress; CHECKPOINT"); err != nil {
					return nil, fmt.Errorf("ingress: %w", err)
				}
				b.progress("ingress, %s, %d clients: %s, run %d of %d, pgbench -T %d", what, clients,
					[2]string{"plain INSERT", "pepsi.enqueue()"}[k], i+1, b.o.IngressRuns, secs)
				tps, err := runPgbench(ctx, pgbench, dsn, clients, secs, script)
				if err != nil {
					return nil, err
				}
				sides[k] = append(sides[k], ingressRun{tps: tps})
			}
		}
		out[clients] = sides
	}
	var armed bool
	if err := conn.QueryRow(ctx, "SELECT pepsi.armed()").Scan(&armed); err != nil {
		return nil, err
	}
	if armed {
		return nil, fmt.Errorf("ingress, %s: the wake flag reads as armed", what)
	}
	if _, err := conn.Exec(ctx, "TRUNCATE bench.app, bench.outbox, pepsi.ingress"); err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	return out, nil
}

// runPgbench runs script with pgbench at clients for secs seconds, and
// returns its rate. A run whose time went on connecting runs again for
// twice as long, twice at most.
func runPgbench(ctx context.Context, pgbench, dsn string, clients, secs int, script string) (float64, error) {
	var out []byte
	var err error
	var tps float64
	for t := secs; ; t *= 2 {
		cmd := exec.CommandContext(ctx, pgbench, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(ingressThreads),
			"-T", strconv.Itoa(t), "-n", "-f", script, dsn)
		cmd.Env = append(os.Environ(), "PGAPPNAME=pepsi bench ingress")
		if out, err = cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("ingress: %s: %v:\n%s", pgbench, err, tail(out))
		}
		if tps, _, err = parsePgbench(out); !errors.Is(err, errNoTransactions) || t >= 4*secs {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("ingress: %s: %w:\n%s", pgbench, err, tail(out))
	}
	return tps, nil
}

// reportIdle adds the figures of ingressFresh (key "new") or ingressAfter
// (key "after") to the report.
func (b *bench) reportIdle(sides map[int][2]ingressSide, key, what, median string) {
	for _, clients := range ingressClients {
		plain, pepsi := sides[clients][0].median(), sides[clients][1].median()
		f := Figure{Key: fmt.Sprintf("ingress.%d.%s", clients, key),
			Name:  fmt.Sprintf("SQL ingress, %d clients, %s: pepsi.enqueue() transaction%s", clients, what, median),
			Value: pepsi.tps, Unit: "tx/s", Ceiling: plain.tps, Of: "same transaction with a plain INSERT, same run",
			Target: "≥ 0.90"}
		if plain.tps > 0 {
			f.Met = atLeast(pepsi.tps/plain.tps, targetIngressRatio)
		}
		b.report.add(f)
		b.report.note("SQL ingress, %d clients, %s: tx/s by run, plain %s; pepsi.enqueue() %s",
			clients, what, sides[clients][0].tps(), sides[clients][1].tps())
	}
}
