package peers

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/worker"
)

// The real work of every pass: one row of the application's table, in
// the pass's transaction. acctRows is its size; message (job) id i
// updates row i % acctRows + 1.
const (
	acctRows = 10_000
	acctSQL  = "UPDATE acct SET n = n + 1 WHERE id = $1"
)

func acctID(id int64) int64 { return id%acctRows + 1 }

// stageMain is `peers stage --kind worker|worker-onetrip|plain|plain-onetrip [--next STAGE] [-c FILE]`,
// the stage program of the real-work pipelines (PROGRAM in the pepsi.conf
// that bench/peers writes); the dispatcher sets PEPSI_DSN and PEPSI_STAGE
// and appends -c FILE.
//
//	--kind worker: a pkg/worker stage as README shows it: m.Queue for the
//	  UPDATE (it goes out with the move and COMMIT), worker.Advance or
//	  worker.Finish.
//	--kind worker-onetrip: the same function in worker.OneTrip mode
//	  (worker.MainOneTrip): BEGIN, the UPDATE, the move and COMMIT in one
//	  batch, with no read of the message first.
//	--kind plain: what a user writes in any language with a plain driver:
//	  BEGIN, the UPDATE, SELECT pepsi.advance($1, $2) (or pepsi.finish($1)),
//	  COMMIT, each its own round trip, no pipelining.
//	--kind plain-onetrip: the same driver, a pass in one round trip: the
//	  UPDATE and the move as a pgx.Batch (one Sync, so PostgreSQL runs them
//	  as one implicit transaction), as pepsi-worker(7) EXAMPLES tells a
//	  driver that binds parameters on the server to do.
func stageMain(args []string) int {
	fs := flag.NewFlagSet("stage", flag.ContinueOnError)
	kind := fs.String("kind", "worker", "worker, worker-onetrip, plain or plain-onetrip")
	next := fs.String("next", "", "the stage to advance to; none: finish")
	fs.String("c", "", "the dispatcher's configuration (unused)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	dsn, stage := os.Getenv("PEPSI_DSN"), os.Getenv("PEPSI_STAGE")
	if dsn == "" {
		log.Error("PEPSI_DSN is not set")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch *kind {
	case "worker", "worker-onetrip":
		// What worker.Main, the README's stage, does before Run.
		worker.OneProcessor()
		mode := worker.InTransaction
		if *kind == "worker-onetrip" {
			mode = worker.OneTrip // worker.MainOneTrip
		}
		out := worker.Finish()
		if *next != "" {
			out = worker.Advance(*next)
		}
		err := worker.Run(ctx, func(ctx context.Context, m *worker.Message) (worker.Move, error) {
			m.Queue(acctSQL, acctID(m.ID))
			return out, nil
		}, worker.Options{DSN: dsn, AppName: "peers stage " + stage, In: os.Stdin, Out: os.Stdout, Log: log, Stage: stage, Mode: mode,
			Protocol: worker.EnvProtocol()}) // pass tokens, as worker.Main asks for them
		if err != nil && ctx.Err() == nil {
			log.Error("stage", "err", err)
			return 1
		}
		return 0
	case "plain", "plain-onetrip":
		return plainStage(ctx, dsn, stage, *next, *kind == "plain-onetrip", os.Stdin, os.Stdout, log)
	}
	log.Error("stage: --kind must be worker, worker-onetrip, plain or plain-onetrip")
	return 2
}

// plainStage serves message ids from in, one transaction of four round
// trips each, or (oneTrip) of one.
func plainStage(ctx context.Context, dsn, stage, next string, oneTrip bool, in io.Reader, out io.Writer, log *slog.Logger) int {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		log.Error("DSN", "err", err)
		return 2
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "peers plain stage " + stage
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		log.Error("connect", "err", err)
		return 75
	}
	defer conn.Close(context.Background())
	move, moveArgs := "SELECT pepsi.finish($1)", func(id int64) []any { return []any{id} }
	if next != "" {
		move, moveArgs = "SELECT pepsi.advance($1, $2)", func(id int64) []any { return []any{id, next} }
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		id, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
		if err != nil {
			fmt.Fprintln(out, "1 # bad message id")
			continue
		}
		err = func() error {
			if oneTrip {
				b := &pgx.Batch{}
				b.Queue(acctSQL, acctID(id))
				b.Queue(move, moveArgs(id)...)
				return conn.SendBatch(ctx, b).Close()
			}
			if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
				return err
			}
			if _, err := conn.Exec(ctx, acctSQL, acctID(id)); err != nil {
				return err
			}
			if _, err := conn.Exec(ctx, move, moveArgs(id)...); err != nil {
				return err
			}
			_, err := conn.Exec(ctx, "COMMIT")
			return err
		}()
		if err == nil {
			if _, err := io.WriteString(out, "0\n"); err != nil {
				return 1
			}
			continue
		}
		if ctx.Err() != nil {
			return 0 // told to stop: the message in hand goes back
		}
		var pgErr *pgconn.PgError
		if conn.IsClosed() || !errors.As(err, &pgErr) {
			fmt.Fprintf(out, "75 # database connection lost: %s\n", oneLine(err))
			return 75
		}
		if !oneTrip {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
		log.Error("message", "id", id, "err", err)
		fmt.Fprintf(out, "1 # %s\n", oneLine(err))
	}
	return 0
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
