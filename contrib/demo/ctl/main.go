// Command ctl is the demo's helper (bin/pepsi-demo), which scripts/demo
// (`make demo`) runs around pepsi itself:
//
//	pepsi-demo reset            (re)create the database pepsi_demo on the server of
//	                            PEPSI_DSN with the demo's own tables; print its DSN
//	pepsi-demo generate N       print N sample orders, one JSON object a line
//	pepsi-demo watch [--pid P]  print progress until no message is pending,
//	                            running or paused (exit 1 if process P dies first)
//	pepsi-demo summary          messages per stage and status
//	pepsi-demo stats            the dispatcher's statistics per stage
//	pepsi-demo totals           done / failed / retried, and why messages failed
//
// All but reset and generate read the configuration as pepsi does
// (PEPSI_CONFIG or -c is not needed: scripts/demo exports PEPSI_CONFIG).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
)

const usage = `usage: pepsi-demo reset | generate N | watch [--pid PID] [--timeout D] | summary | stats | totals`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	ctx := context.Background()
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "reset":
		err = reset(ctx)
	case "generate":
		err = generate(args)
	case "watch":
		err = watch(ctx, args)
	case "summary", "stats", "totals":
		err = report(ctx, cmd)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pepsi-demo %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

// demoDB is the database the demo owns: reset drops and recreates it.
const demoDB = "pepsi_demo"

// schema is the demo application's own tables, beside pepsi's.
const schema = `
CREATE SCHEMA demo;
CREATE TABLE demo.customer (
    id     text PRIMARY KEY,
    name   text NOT NULL,
    tier   text NOT NULL,
    region text NOT NULL
);
INSERT INTO demo.customer
SELECT 'c-' || i, 'Customer ' || i,
       (ARRAY['gold', 'silver', 'bronze'])[1 + i % 3],
       (ARRAY['north', 'south', 'east', 'west'])[1 + i % 4]
  FROM generate_series(1, 200) AS i;
CREATE TABLE demo.orders (
    id           bigint PRIMARY KEY,  -- the pepsi message id
    order_no     bigint NOT NULL,
    customer     text NOT NULL,
    amount       numeric(10, 2) NOT NULL,
    items        integer NOT NULL,
    tier         text,
    region       text,
    total        numeric(10, 2),
    tries        integer NOT NULL DEFAULT 0,
    delivered_at timestamptz
);`

// reset drops and creates pepsi_demo on PEPSI_DSN's server and prints its DSN.
func reset(ctx context.Context) error {
	server := os.Getenv("PEPSI_DSN")
	if server == "" {
		return errors.New("PEPSI_DSN is not set")
	}
	const hint = "the role needs CREATEDB; or point PEPSI_DSN at a server where it has it"
	if err := pgadmin.Recreate(ctx, server, demoDB); err != nil {
		return fmt.Errorf("%w (%s)", err, hint)
	}
	dsn := pgadmin.WithDatabase(server, demoDB)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// The demo's data is throwaway: commits need not wait for the WAL to
	// reach the disk (a crash may lose the last few; nothing else). A
	// production pipeline keeps the default. It holds for the sessions
	// that come after this one: pepsi's.
	const async = "ALTER DATABASE " + demoDB + " SET synchronous_commit = off"
	if _, err := conn.Exec(ctx, async); err != nil {
		return fmt.Errorf("%s: %w (%s)", async, err, hint)
	}
	if _, err := conn.Exec(ctx, schema); err != nil {
		return fmt.Errorf("demo schema: %w", err)
	}
	fmt.Println(dsn)
	return nil
}

// generate prints n orders: about 1 in 200 is malformed (parse fails it),
// about 1 in 200 names a customer that does not exist (enrich fails it).
func generate(args []string) error {
	if len(args) != 1 {
		return errors.New("want one argument: the number of messages")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 {
		return fmt.Errorf("%q is not a positive number", args[0])
	}
	r := rand.New(rand.NewPCG(4, 2)) // the same sample every run
	w := newWriter()
	for i := 1; i <= n; i++ {
		customer := 1 + r.IntN(200)
		if r.IntN(200) == 0 {
			customer = 900 + r.IntN(100)
		}
		line := fmt.Sprintf(`{"order": %d, "customer": "c-%d", "amount": %d.%02d, "items": %d}`,
			100000+i, customer, 5+r.IntN(495), r.IntN(100), 1+r.IntN(9))
		if r.IntN(200) == 0 {
			line = line[:len(line)/2] // cut short: not JSON
		}
		w.WriteString(line + "\n")
	}
	return w.Flush()
}

// connect opens the demo database named by the pepsi configuration.
func connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := config.Resolve("", nil)
	if err != nil {
		return nil, err
	}
	return pgx.Connect(ctx, cfg.DSN)
}

// counts is the queue by status.
type counts struct{ pending, running, paused, done, failed int64 }

func (c counts) total() int64   { return c.pending + c.running + c.paused + c.done + c.failed }
func (c counts) settled() int64 { return c.done + c.failed }

func readCounts(ctx context.Context, conn *pgx.Conn) (counts, error) {
	var c counts
	err := conn.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'running'),
		       count(*) FILTER (WHERE status = 'paused'), count(*) FILTER (WHERE status = 'done'),
		       count(*) FILTER (WHERE status = 'failed')
		  FROM pepsi.state`).Scan(&c.pending, &c.running, &c.paused, &c.done, &c.failed)
	return c, err
}

// watch prints a progress line until the queue is drained.
func watch(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	pid := fs.Int("pid", 0, "fail if process `PID` (the dispatcher) exits first")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after `D`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	tty := isTerminal(os.Stdout)
	start := time.Now()
	var lastPrint time.Time
	for {
		c, err := readCounts(ctx, conn)
		if err != nil {
			return err
		}
		drained := c.total() > 0 && c.settled() == c.total()
		now := time.Now()
		line := fmt.Sprintf("%6.1fs  %d/%d settled: %d done, %d failed | %d pending, %d running, %d paused",
			now.Sub(start).Seconds(), c.settled(), c.total(), c.done, c.failed, c.pending, c.running, c.paused)
		switch {
		case tty:
			fmt.Printf("\r%s\033[K", line)
			if drained {
				fmt.Println()
			}
		case drained || now.Sub(lastPrint) >= 2*time.Second:
			fmt.Println(line)
			lastPrint = now
		}
		if drained {
			return nil
		}
		if *pid > 0 && syscall.Kill(*pid, 0) != nil {
			if tty {
				fmt.Println()
			}
			return fmt.Errorf("the dispatcher (pid %d) exited before the queue was drained", *pid)
		}
		if now.Sub(start) > *timeout {
			if tty {
				fmt.Println()
			}
			return fmt.Errorf("queue not drained after %v", *timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// report prints one of the reports.
func report(ctx context.Context, which string) error {
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	var rows pgx.Rows
	switch which {
	case "summary":
		fmt.Fprintln(w, "STAGE\tPENDING\tRUNNING\tPAUSED\tDONE\tFAILED\t")
		rows, err = conn.Query(ctx, `
			SELECT stage, count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'running'),
			       count(*) FILTER (WHERE status = 'paused'), count(*) FILTER (WHERE status = 'done'),
			       count(*) FILTER (WHERE status = 'failed')
			  FROM pepsi.state GROUP BY stage ORDER BY stage`)
	case "stats":
		fmt.Fprintln(w, "STAGE\tPROCESSED\tFAILED\tTIMEOUTS\tCRASHES\tBUSY SECONDS\t")
		rows, err = conn.Query(ctx, `
			SELECT stage, sum(processed)::bigint, sum(failed)::bigint, sum(timeouts)::bigint, sum(crashes)::bigint, round(sum(busy_seconds)::numeric, 1)
			  FROM pepsi.stage_stats GROUP BY stage ORDER BY stage`)
	case "totals":
		return totals(ctx, conn)
	}
	if err != nil {
		return err
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return err
		}
		for _, v := range vals {
			fmt.Fprintf(w, "%v\t", v)
		}
		fmt.Fprintln(w)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return w.Flush()
}

// totals prints the demo's result: done / failed / retried, and the
// dead letters grouped by reason (numbers in a reason read as N).
func totals(ctx context.Context, conn *pgx.Conn) error {
	c, err := readCounts(ctx, conn)
	if err != nil {
		return err
	}
	var paused, redelivered int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(sum(paused), 0)::bigint FROM pepsi.dispatch_stats").Scan(&paused); err != nil {
		return err
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM demo.orders WHERE tries > 1 AND delivered_at IS NOT NULL").Scan(&redelivered); err != nil {
		return err
	}
	fmt.Printf("totals: %d messages: %d done, %d failed, %d retried (%d delivered on a retry)\n",
		c.total(), c.done, c.failed, paused, redelivered)
	if c.settled() != c.total() {
		fmt.Printf("        (%d not settled yet)\n", c.total()-c.settled())
	}
	rows, err := conn.Query(ctx, `
		SELECT stage, regexp_replace(coalesce(error, dispatch_error, '?'), '[0-9]+', 'N', 'g') AS reason, count(*)
		  FROM pepsi.state WHERE status = 'failed'
		 GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT 10`)
	if err != nil {
		return err
	}
	defer rows.Close()
	first := true
	for rows.Next() {
		var stage, reason string
		var n int64
		if err := rows.Scan(&stage, &reason, &n); err != nil {
			return err
		}
		if first {
			fmt.Println("failed (the dead-letter state), by reason:")
			first = false
		}
		fmt.Printf("  %6d  at %-8s %s\n", n, stage, reason)
	}
	return rows.Err()
}

// newWriter buffers stdout.
func newWriter() *bufio.Writer { return bufio.NewWriterSize(os.Stdout, 64<<10) }

// isTerminal reports whether f is a terminal (a character device).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
