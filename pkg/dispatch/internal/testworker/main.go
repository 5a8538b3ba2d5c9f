// Command testworker is a stage program for the dispatcher's tests. Each
// message's payload says what to do per stage, as space-separated
// STAGE=ACTION[:ARG] entries; a stage without an entry finishes the message.
//
// Actions: advance:NEXT, finish, pause:INTERVAL, pauseonce:INTERVAL (pause on
// the first attempt, finish after), fail:REASON, exit:N (answer N), noop
// (answer 0 without moving), crash (exit before answering), crashafter
// (finish, then exit before answering), advcrash:NEXT, hang, garbage, long
// (a 70 KiB line), extra (finish and answer twice), slow:DURATION (then
// finish), fused:STAGE (finish and report STAGE=0.25), closeout (close
// stdout and keep running), tnext:STAGE, tdone and tpause:SECONDS (answer
// the transition on the status line instead of making it; tpause only on
// the first attempt, then tdone).
//
// Every committed pass is recorded in test_passes; every start in test_workers.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	ctx := context.Background()
	stage := os.Getenv("PEPSI_STAGE")
	conn, err := pgx.Connect(ctx, os.Getenv("PEPSI_DSN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker: connect:", err)
		os.Exit(1)
	}
	_, err = conn.Exec(ctx, "INSERT INTO test_workers (pid, stage, args, config) VALUES ($1, $2, $3, $4)",
		os.Getpid(), stage, strings.Join(os.Args[1:], " "), os.Getenv("PEPSI_CONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker: register:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "testworker ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		id, err := strconv.ParseInt(in.Text(), 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testworker: bad id:", in.Text())
			os.Exit(1)
		}
		answer, err := handle(ctx, conn, stage, id)
		if err != nil {
			fmt.Fprintf(os.Stdout, "1 # %v\n", err)
			continue
		}
		os.Stdout.WriteString(answer)
	}
}

func handle(ctx context.Context, conn *pgx.Conn, stage string, id int64) (string, error) {
	var payload string
	var attempts int
	err := conn.QueryRow(ctx, `SELECT convert_from(m.payload, 'UTF8'), s.attempts
		FROM pepsi.message m JOIN pepsi.state s USING (id) WHERE id = $1`, id).Scan(&payload, &attempts)
	if err != nil {
		return "", err
	}
	action, arg := "finish", ""
	for _, f := range strings.Fields(payload) {
		if k, v, ok := strings.Cut(f, "="); ok && k == stage {
			action, arg, _ = strings.Cut(v, ":")
		}
	}
	pass := func(sql string, args ...any) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO test_passes (id, stage, pid) VALUES ($1, $2, $3)", id, stage, os.Getpid()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sql, args...)
			return err
		})
	}
	finish := func() error { return pass("SELECT pepsi.finish($1)", id) }
	switch action {
	case "advance":
		return "0\n", pass("SELECT pepsi.advance($1, $2)", id, arg)
	case "finish":
		return "0\n", finish()
	case "pause":
		return "0\n", pass("SELECT pepsi.pause($1, $2::interval)", id, arg)
	case "pauseonce":
		if attempts <= 1 {
			return "0\n", pass("SELECT pepsi.pause($1, $2::interval)", id, arg)
		}
		return "0\n", finish()
	case "fail":
		return "0\n", pass("SELECT pepsi.fail($1, $2)", id, arg)
	case "exit":
		return arg + " # failing on purpose\n", nil
	case "noop":
		return "0\n", nil
	case "crash":
		os.Exit(3)
	case "crashafter":
		if err := finish(); err != nil {
			return "", err
		}
		os.Exit(3)
	case "advcrash":
		if err := pass("SELECT pepsi.advance($1, $2)", id, arg); err != nil {
			return "", err
		}
		os.Exit(3)
	case "hang":
		select {}
	case "garbage":
		return "hello world\n", nil
	case "long":
		return strings.Repeat("x", 70<<10) + "\n", nil
	case "extra":
		return "0\n0\n", finish()
	case "slow":
		d, _ := time.ParseDuration(arg)
		time.Sleep(d)
		return "0\n", finish()
	case "fused":
		return "0 " + arg + "=0.25\n", finish()
	case "tnext":
		return "0 next:" + arg + "\n", nil
	case "tdone":
		return "0 done\n", nil
	case "tpause":
		if attempts <= 1 {
			return "0 pause:" + arg + "\n", nil
		}
		return "0 done\n", nil
	case "closeout":
		os.Stdout.Close()
		select {}
	}
	return "", fmt.Errorf("testworker: unknown action %q", action)
}
