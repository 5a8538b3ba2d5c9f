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
	scripts := [2]string{b.path("fresh-plain.sql"), b.path("fresh-pepsi.sql")}
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
				b.progress("ingress, new database, %d clients: %s, run %d of %d, pgbench -T %d", clients,
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
		return nil, errors.New("ingress: a new database reads its wake flag as armed")
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

// reportFresh adds the new database's figures to the report.
func (b *bench) reportFresh(fresh map[int][2]ingressSide, median string) {
	for _, clients := range ingressClients {
		plain, pepsi := fresh[clients][0].median(), fresh[clients][1].median()
		f := Figure{Key: fmt.Sprintf("ingress.%d.new", clients),
			Name:  fmt.Sprintf("SQL ingress, %d clients, a new database (no dispatcher ever ran): pepsi.enqueue() transaction%s", clients, median),
			Value: pepsi.tps, Unit: "tx/s", Ceiling: plain.tps, Of: "same transaction with a plain INSERT, same run",
			Target: "≥ 0.90"}
		if plain.tps > 0 {
			f.Met = atLeast(pepsi.tps/plain.tps, targetIngressRatio)
		}
		b.report.add(f)
		b.report.note("SQL ingress, %d clients, a new database: tx/s by run, plain %s; pepsi.enqueue() %s",
			clients, fresh[clients][0].tps(), fresh[clients][1].tps())
	}
}
