package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/worker"
)

// child is a child's queue row as the tests read it.
type child struct {
	stage, status, payload, headers string
	priority                        int
	key                             string
}

// children reads the children of parent, in id order.
func (f *fixture) children(parent int64) []child {
	f.t.Helper()
	rows, err := f.db.Pool.Query(context.Background(), `
		SELECT s.stage, s.status, convert_from(m.payload, 'UTF8'), m.headers::text, s.priority, coalesce(s.dedup_key, '')
		  FROM pepsi.state s JOIN pepsi.message m USING (id) WHERE s.parent = $1 ORDER BY s.id`, parent)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []child
	for rows.Next() {
		var c child
		if err := rows.Scan(&c.stage, &c.status, &c.payload, &c.headers, &c.priority, &c.key); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// result reads message id's result; nil when it has none.
func (f *fixture) result(id int64) []byte {
	f.t.Helper()
	var r []byte
	if err := f.db.Pool.QueryRow(context.Background(), "SELECT result FROM pepsi.state WHERE id = $1", id).Scan(&r); err != nil {
		f.t.Fatal(err)
	}
	return r
}

// oddResult has bytes a text encoding would mangle: NUL, a backslash, an
// invalid UTF-8 byte.
var oddResult = []byte("\x00\\x41\xff ok")

// spawner is a stage whose payload says which graph call to make; it
// records a side effect first, to show whether its transaction committed
// (in OnStatusLine mode, which has none, it records none).
func spawner(ctx context.Context, m *worker.Message) (worker.Move, error) {
	switch {
	case m.Tx != nil:
		if _, err := m.Tx.Exec(ctx, "INSERT INTO side VALUES ($1)", m.ID); err != nil {
			return worker.Move{}, err
		}
	case m.Stage == "a":
		m.Queue("INSERT INTO side VALUES ($1)", m.ID)
	}
	if err := m.Load(ctx); err != nil {
		return worker.Move{}, err
	}
	switch string(m.Payload) {
	case "fan":
		id, err := m.Spawn(ctx, "c", []byte("one"), &worker.SpawnOptions{Headers: map[string]string{"h": "v"}, Priority: -2, Key: fmt.Sprint("k", m.ID)})
		if err != nil {
			return worker.Move{}, err
		}
		if (id == 0) != (m.Tx == nil) {
			return worker.Move{}, fmt.Errorf("Spawn returned id %d", id)
		}
		n, err := m.SpawnMany(ctx, "c", [][]byte{[]byte("x"), []byte("y"), {}}, nil)
		if err != nil || n != 3 {
			return worker.Move{}, fmt.Errorf("SpawnMany: %d, %v", n, err)
		}
		return worker.Join("j"), nil
	case "none":
		if n, err := m.SpawnMany(ctx, "c", nil, nil); err != nil || n != 0 {
			return worker.Move{}, fmt.Errorf("SpawnMany of none: %d, %v", n, err)
		}
		return worker.Join("j"), nil
	case "badchild":
		if _, err := m.Spawn(ctx, "c", []byte("one"), nil); err != nil {
			return worker.Move{}, err
		}
		if _, err := m.Spawn(ctx, "no spaces", nil, nil); err != nil {
			return worker.Move{}, err
		}
		return worker.Join("j"), nil
	case "keymany":
		_, err := m.SpawnMany(ctx, "c", [][]byte{{}}, &worker.SpawnOptions{Key: "k"})
		return worker.Move{}, err
	case "result":
		return worker.FinishWith(oddResult), nil
	case "max":
		return worker.FinishWith(bytes.Repeat([]byte("r"), worker.MaxResult)), nil
	case "big":
		return worker.FinishWith(make([]byte, worker.MaxResult+1)), nil
	case "badjoin":
		return worker.Join("no spaces"), nil
	}
	return worker.Move{}, errors.New("unknown payload")
}

// graphWant is what becomes of each payload of spawner.
type graphWant struct {
	payload, answer   string // the answer: exact, or a prefix when it ends with "…"
	status, stage     string
	children, results string // the children's payloads, joined by ","; the result
}

// runGraph serves the spawner's payloads in mode and checks the answers,
// rows, children and results.
func runGraph(t *testing.T, f *fixture, opts worker.Options, wants []graphWant) {
	t.Helper()
	payloads := make([]string, len(wants))
	for i, w := range wants {
		payloads[i] = w.payload
	}
	ids := f.running(payloads...)
	var out bytes.Buffer
	o := f.opts(strings.NewReader(idLines(ids)), &out)
	o.Mode, o.Stage = opts.Mode, opts.Stage
	if err := worker.Run(context.Background(), spawner, o); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != len(wants) {
		t.Fatalf("answers %q, want %d", out.String(), len(wants))
	}
	for i, w := range wants {
		id := ids[i]
		if a, ok := strings.CutSuffix(w.answer, "…"); ok && !strings.HasPrefix(got[i], a) || !ok && got[i] != w.answer {
			t.Errorf("%s: answered %q, want %q", w.payload, got[i], w.answer)
		}
		status, stage, _, _ := f.row(id)
		if status != w.status || stage != w.stage {
			t.Errorf("%s: %s at %s, want %s at %s", w.payload, status, stage, w.status, w.stage)
		}
		var cs []string
		for _, c := range f.children(id) {
			cs = append(cs, c.payload)
			if c.stage != "c" || c.status != "pending" {
				t.Errorf("%s: child %+v, want pending at c", w.payload, c)
			}
			if c.payload == "one" && w.payload == "fan" && (c.headers != `{"h": "v"}` || c.priority != -2 || c.key != fmt.Sprint("k", id)) {
				t.Errorf("%s: the keyed child is %+v", w.payload, c)
			}
		}
		if g := strings.Join(cs, ","); g != w.children {
			t.Errorf("%s: children %q, want %q", w.payload, g, w.children)
		}
		if r := f.result(id); string(r) != w.results || (r == nil) != (w.results == "") {
			t.Errorf("%s: result %q, want %q", w.payload, r, w.results)
		}
		committed := opts.Mode != worker.OnStatusLine && (got[i] == "0" || strings.HasPrefix(got[i], "0 "))
		if side := f.sideEffects(id) == 1; side != committed {
			t.Errorf("%s: side effect committed %v with the answer %q", w.payload, side, got[i])
		}
	}
}

// TestRunGraph: in the default mode a stage spawns children in its
// pass's transaction (one, keyed and with headers, or many), moves the
// message to wait at a join, and finishes with a result up to 64 KiB; a
// refused child or a result too long fails the pass, rolled back whole.
// With the exec mode chosen behind a pooler too (text parameters).
func TestRunGraph(t *testing.T) {
	for _, mode := range []string{"", "exec"} {
		t.Run("mode="+mode, func(t *testing.T) {
			f := newFixture(t)
			if mode != "" {
				f.dsn = withParam(f.dsn, "default_query_exec_mode", mode)
			}
			runGraph(t, f, worker.Options{}, []graphWant{
				{"fan", "0", "waiting", "j", "one,x,y,", ""},
				{"none", "0", "waiting", "j", "", ""},
				{"badchild", `1 # ERROR: pepsi.spawn: stage "no spaces" is not a stage name…`, "running", "a", "", ""},
				{"keymany", "1 # SpawnMany makes no child with a key: spawn a keyed child with Spawn", "running", "a", "", ""},
				{"result", "0", "done", "a", "", string(oddResult)},
				{"max", "0", "done", "a", "", strings.Repeat("r", worker.MaxResult)},
				{"big", "1 # cannot finish with a result of 65537 bytes: at most 65536 (64 KiB)", "running", "a", "", ""},
				{"badjoin", `1 # cannot join at "no spaces": not a stage name`, "running", "a", "", ""},
			})
		})
	}
}

// TestRunGraphOneTrip: in OneTrip mode the children are made with the
// move, in its one round trip; a refused one rolls the pass back.
func TestRunGraphOneTrip(t *testing.T) {
	f := newFixture(t)
	runGraph(t, f, worker.Options{Mode: worker.OneTrip, Stage: "a"}, []graphWant{
		{"fan", "0", "waiting", "j", "one,x,y,", ""},
		{"none", "0", "waiting", "j", "", ""},
		{"badchild", `1 # ERROR: pepsi.spawn: stage "no spaces" is not a stage name…`, "running", "a", "", ""},
		{"result", "0", "done", "a", "", string(oddResult)},
		{"big", "1 # cannot finish with a result of 65537 bytes…", "running", "a", "", ""},
	})
}

// TestRunGraphOnStatusLine: with no transaction a stage spawns nothing;
// a join is answered on the status line, a result is left with
// pepsi.finish at once.
func TestRunGraphOnStatusLine(t *testing.T) {
	f := newFixture(t)
	runGraph(t, f, worker.Options{Mode: worker.OnStatusLine, Stage: "sl"}, []graphWant{
		{"fan", "1 # spawning children needs the pass's transaction (the default mode or OneTrip, not OnStatusLine)", "running", "a", "", ""},
		{"none", "1 # SpawnMany of none: 0, spawning children needs…", "running", "a", "", ""},
		{"result", "0", "done", "a", "", string(oddResult)},
		{"badjoin", `1 # cannot join at "no spaces"…`, "running", "a", "", ""},
	})
	// A join with no children: "0 join:j", for the dispatcher.
	ids := f.running("x")
	var out bytes.Buffer
	o := f.statusLineOpts(idLines(ids), &out)
	join := func(context.Context, *worker.Message) (worker.Move, error) { return worker.Join("j"), nil }
	if err := worker.Run(context.Background(), join, o); err != nil {
		t.Fatal(err)
	}
	if out.String() != "0 join:j\n" {
		t.Errorf("answered %q, want %q", out.String(), "0 join:j\n")
	}
}

// TestRunChildren: a join stage reads its message's children, in the
// order spawned, each with its stage, status, error and result; in every
// mode.
func TestRunChildren(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	parents := f.running("p", "p", "p")
	var kids [][]int64
	for _, p := range parents {
		var ids []int64
		for _, pl := range []string{"ok", "empty", "fail", "open"} {
			var id int64
			if err := f.db.Pool.QueryRow(ctx, "SELECT pepsi.spawn($1, 'c', $2::bytea)", p, []byte(pl)).Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		kids = append(kids, ids)
		for _, q := range []string{
			"UPDATE pepsi.state SET status = 'running' WHERE id = ANY($1::int8[])",
			"SELECT pepsi.finish(($1::int8[])[1], NULL, '\\x00ff'::bytea)",
			"SELECT pepsi.finish(($1::int8[])[2])",
			"SELECT pepsi.fail(($1::int8[])[3], 'no good')",
			"UPDATE pepsi.state SET status = 'pending' WHERE id = ($1::int8[])[4]",
		} {
			if _, err := f.db.Pool.Exec(ctx, q, ids); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	for i, mode := range []worker.Mode{worker.InTransaction, worker.OneTrip, worker.OnStatusLine} {
		read := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
			cs, err := m.Children(ctx)
			if err != nil {
				return worker.Move{}, err
			}
			var b strings.Builder
			for j, c := range cs {
				if c.ID != kids[i][j] || c.Stage != "c" || c.UpdatedAt.IsZero() {
					return worker.Move{}, fmt.Errorf("child %d: %+v", j, c)
				}
				fmt.Fprintf(&b, "%s %q %q %v;", c.Status, c.Error, c.Result, c.Result == nil)
			}
			return worker.Fail(b.String()), nil
		}
		var out bytes.Buffer
		o := f.opts(strings.NewReader(idLines(parents[i:i+1])), &out)
		o.Mode, o.Stage = mode, "a"
		if err := worker.Run(ctx, read, o); err != nil {
			t.Fatal(err)
		}
		_, _, got, _ := f.row(parents[i])
		want := `done "" "\x00\xff" false;done "" "" true;failed "no good" "" true;pending "" "" true;`
		if out.String() != "0\n" || got != want {
			t.Errorf("mode %d: answered %q, read %s\nwant %s", mode, out.String(), got, want)
		}
	}
}
