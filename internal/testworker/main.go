// Command testworker is a stage program for the dispatcher's tests. Each
// message's payload says what to do per stage, as space-separated
// STAGE=ACTION[:ARG] entries; a stage without an entry finishes the message.
//
// Actions: advance:NEXT, finish, pause:INTERVAL, pauseonce:INTERVAL (pause on
// the first attempt, finish after), fail:REASON, exit:N (answer N), noop
// (answer 0 without moving), crash (exit before answering), crashafter
// (finish, then exit before answering), lockfinish (finish in a pass that
// locks the message's row first), advcrash:NEXT, hang, garbage, long
// (a 70 KiB line), extra (finish and answer twice), slow:DURATION (then
// finish), fused:STAGE (finish and report STAGE=0.25), closeout (close
// stdout and keep running), stderr:COUNTxSIZE (write COUNT lines of SIZE
// bytes, "spew N " padded with x, to stderr, then finish), tnext:STAGE, tdone and tpause:SECONDS (answer
// the transition on the status line instead of making it; tpause only on
// the first attempt, then tdone).
//
// Graphs: fanout:N/STAGE[+STAGE...]/JOIN spawns N children with this
// message's payload, spread over the stages, and moves the message to wait
// at JOIN (pepsi.join; tfanout answers join:JOIN on the status line
// instead); result finishes with the result "rID"; joinread records what
// pepsi.children says of the message's children in test_joins (id,
// children, results as result left, failed, cancelled) and finishes.
//
// For fault injection: hangonce:NEXT, garbageonce:NEXT and crashonce:NEXT
// hang, print garbage or exit on the first attempt at the stage and, on a
// later attempt, advance to NEXT (finish when NEXT is empty). failtwice:NEXT
// answers 3 on the first attempt, exits before answering on the second,
// and then advances to NEXT (finishes when NEXT is empty). A payload
// field @sleep=DURATION makes every stage sleep that long before it acts,
// so that messages are in flight when a fault strikes.
//
// Only the first 64 KiB of a payload are read, as bytes: a payload may be
// empty, huge or binary. A worker whose connection breaks (the server
// restarted, its session was terminated) answers 1 for the message at hand
// and connects again for the next one.
//
// It asks the dispatcher for pass tokens (protocol.HelloToken) when
// PEPSI_PROTOCOL offers them, unless TESTWORKER_BARE=1, and passes a
// message's token to its moves: a pass the dispatcher gave up cannot move
// its message.
//
// Every committed pass is recorded in test_passes; every start in test_workers.
package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

func main() {
	ctx := context.Background()
	stage := os.Getenv("PEPSI_STAGE")
	conn, err := connect(ctx, stage)
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
	if v, _ := strconv.Atoi(os.Getenv(protocol.EnvProtocol)); v >= 2 && os.Getenv("TESTWORKER_BARE") != "1" {
		fmt.Fprintln(os.Stdout, protocol.HelloToken)
	}
	fmt.Fprintln(os.Stderr, "testworker ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		id, token, err := protocol.ParseIDLine(in.Bytes())
		if err != nil {
			fmt.Fprintln(os.Stderr, "testworker: bad id:", in.Text())
			os.Exit(1)
		}
		if conn == nil {
			if conn, err = connect(ctx, stage); err != nil {
				fmt.Fprintf(os.Stdout, "75 # not run: reconnect: %s\n", oneLine(err)) // protocol.NotRun
				continue
			}
			fmt.Fprintln(os.Stderr, "testworker: reconnected")
		}
		answer, err := handle(ctx, conn, stage, id, token)
		if err != nil {
			if broken(ctx, conn) {
				conn.Close(ctx)
				conn = nil
				fmt.Fprintf(os.Stdout, "75 # not run: %s\n", oneLine(err)) // protocol.NotRun
				continue
			}
			fmt.Fprintf(os.Stdout, "1 # %s\n", oneLine(err))
			continue
		}
		os.Stdout.WriteString(answer)
	}
}

func handle(ctx context.Context, conn *pgx.Conn, stage string, id, token int64) (string, error) {
	var raw []byte
	var attempts int
	err := conn.QueryRow(ctx, `SELECT substring(m.payload for 65536), s.attempts
		FROM pepsi.message m JOIN pepsi.state s USING (id) WHERE id = $1`, id).Scan(&raw, &attempts)
	if err != nil {
		return "", err
	}
	action, arg := "finish", ""
	for _, f := range strings.Fields(string(raw)) {
		k, v, ok := strings.Cut(f, "=")
		switch {
		case ok && k == stage:
			action, arg, _ = strings.Cut(v, ":")
		case ok && k == "@sleep":
			d, _ := time.ParseDuration(v)
			time.Sleep(d)
		}
	}
	// A pass is its record and its transition, in one round trip: the two
	// statements of a batch run in one implicit transaction (one Sync).
	// With a token, the move (sql, a call of one pepsi function) gets it
	// as its last argument.
	pass := func(sql string, args ...any) error {
		sql, args = withToken(sql, args, token)
		b := &pgx.Batch{}
		b.Queue("INSERT INTO test_passes (id, stage, pid) VALUES ($1, $2, $3)", id, stage, os.Getpid())
		b.Queue(sql, args...)
		return conn.SendBatch(ctx, b).Close()
	}
	finish := func() error { return pass("SELECT pepsi.finish($1)", id) }
	switch action {
	case "lockfinish":
		// As pkg/worker and README's Python stage do: the row locked
		// first, for the whole pass.
		b := &pgx.Batch{}
		b.Queue("SELECT FROM pepsi.state WHERE id = $1 AND status = 'running' FOR UPDATE", id)
		b.Queue("INSERT INTO test_passes (id, stage, pid) VALUES ($1, $2, $3)", id, stage, os.Getpid())
		sql, args := withToken("SELECT pepsi.finish($1)", []any{id}, token)
		b.Queue(sql, args...)
		return "0\n", conn.SendBatch(ctx, b).Close()
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
	case "fanout", "tfanout":
		return fanout(ctx, conn, stage, id, token, raw, arg, action == "tfanout")
	case "result":
		bt := &pgx.Batch{}
		bt.Queue("INSERT INTO test_passes (id, stage, pid) VALUES ($1, $2, $3)", id, stage, os.Getpid())
		bt.Queue("SELECT pepsi.finish($1, $2, $3)", id, nullToken(token), []byte("r"+strconv.FormatInt(id, 10)))
		return "0\n", conn.SendBatch(ctx, bt).Close()
	case "joinread":
		return "0\n", pass(`WITH j AS (
			INSERT INTO test_joins (id, children, results, failed, cancelled)
			SELECT $1, count(*), count(*) FILTER (WHERE status = 'done' AND result = convert_to('r' || id, 'UTF8')),
			       count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'cancelled')
			  FROM pepsi.children($1)
			RETURNING id)
			SELECT pepsi.finish(j.id) FROM j`, id)
	case "stderr":
		if err := spew(arg); err != nil {
			return "", err
		}
		return "0\n", finish()
	case "closeout":
		os.Stdout.Close()
		select {}
	case "failtwice":
		switch attempts {
		case 0, 1:
			return "3 # failing on purpose\n", nil
		case 2:
			os.Exit(3)
		}
		if arg == "" {
			return "0\n", finish()
		}
		return "0\n", pass("SELECT pepsi.advance($1, $2)", id, arg)
	case "hangonce", "garbageonce", "crashonce":
		if attempts <= 1 {
			switch action {
			case "hangonce":
				select {}
			case "garbageonce":
				return "hello world\n", nil
			default:
				os.Exit(3)
			}
		}
		if arg == "" {
			return "0\n", finish()
		}
		return "0\n", pass("SELECT pepsi.advance($1, $2)", id, arg)
	}
	return "", fmt.Errorf("testworker: unknown action %q", action)
}

// withToken adds token (if any) to sql's call as its last argument.
func withToken(sql string, args []any, token int64) (string, []any) {
	if token == 0 {
		return sql, args
	}
	i := strings.LastIndexByte(sql, ')')
	return sql[:i] + fmt.Sprintf(", $%d", len(args)+1) + sql[i:], append(args, token)
}

// spew writes COUNT lines of SIZE bytes to stderr, as stderr:COUNTxSIZE says.
func spew(arg string) error {
	c, z, _ := strings.Cut(arg, "x")
	count, err1 := strconv.Atoi(c)
	size, err2 := strconv.Atoi(z)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("testworker: stderr:%s: want COUNTxSIZE", arg)
	}
	w := bufio.NewWriterSize(os.Stderr, 64<<10)
	for i := range count {
		line := fmt.Appendf(nil, "spew %d ", i)
		line = append(line, bytes.Repeat([]byte{'x'}, max(size-len(line), 0))...)
		w.Write(line[:min(size, len(line))])
		w.WriteByte('\n')
	}
	return w.Flush()
}

// connect opens the worker's session, named so that tests can tell it
// from the dispatcher's.
func connect(ctx context.Context, stage string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(os.Getenv("PEPSI_DSN"))
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = fmt.Sprintf("testworker pid %d stage %s", os.Getpid(), stage)
	return pgx.ConnectConfig(ctx, cfg)
}

// broken reports whether conn is no longer usable.
func broken(ctx context.Context, conn *pgx.Conn) bool {
	if conn.IsClosed() {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return conn.Ping(ctx) != nil
}

// oneLine keeps an error on one status line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// nullToken is token as an SQL argument: NULL for none.
func nullToken(token int64) any {
	if token == 0 {
		return nil
	}
	return token
}

// fanout spawns the children fanout:N/STAGES/JOIN asks for, in one
// transaction with the pass's record and the parent's move to its join.
func fanout(ctx context.Context, conn *pgx.Conn, stage string, id, token int64, payload []byte, arg string, line bool) (string, error) {
	parts := strings.Split(arg, "/")
	if len(parts) != 3 {
		return "", fmt.Errorf("testworker: fanout:%s: want N/STAGE[+STAGE...]/JOIN", arg)
	}
	n, err := strconv.Atoi(parts[0])
	if err != nil {
		return "", fmt.Errorf("testworker: fanout:%s: %v", arg, err)
	}
	stages := strings.Split(parts[1], "+")
	b := &pgx.Batch{}
	b.Queue("INSERT INTO test_passes (id, stage, pid) VALUES ($1, $2, $3)", id, stage, os.Getpid())
	for i, st := range stages {
		k := n / len(stages)
		if i < n%len(stages) {
			k++
		}
		b.Queue("SELECT pepsi.spawn_many($1, $2, array_fill($3::bytea, ARRAY[$4::int]), p_pass => $5)", id, st, payload, k, nullToken(token))
	}
	if line {
		return "0 join:" + parts[2] + "\n", conn.SendBatch(ctx, b).Close()
	}
	b.Queue("SELECT pepsi.join($1, $2, $3)", id, parts[2], nullToken(token))
	return "0\n", conn.SendBatch(ctx, b).Close()
}
