package worker_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/worker"
	"github.com/pepsi-dev/pepsi/pkg/worker/workertest"
)

// graphStage, set in the environment, makes this test binary the stage
// programs of TestGraphDispatched (see TestMain), its mode by its stage.
const graphStage = "PEPSI_WORKER_TEST_GRAPH"

// mainGraph serves the stage $PEPSI_STAGE of TestGraphDispatched:
//
//	split  (default mode) a payload "N": N children at item, then a join at sum
//	item   (OneTrip) finishes with the result "r" + its payload
//	sum    (default mode) reads the children, records what it read in joined
func mainGraph() {
	switch os.Getenv("PEPSI_STAGE") {
	case "item":
		worker.MainOneTrip(func(ctx context.Context, m *worker.Message) (worker.Move, error) {
			if err := m.Load(ctx); err != nil {
				return worker.Move{}, err
			}
			return worker.FinishWith(append([]byte("r"), m.Payload...)), nil
		})
	case "sum":
		worker.Main(sumStage)
	}
	worker.Main(func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		n, err := strconv.Atoi(string(m.Payload))
		if err != nil {
			return worker.Fail("not a number"), nil
		}
		items := make([][]byte, n)
		for i := range items {
			items[i] = []byte(strconv.Itoa(i))
		}
		if _, err := m.SpawnMany(ctx, "item", items, &worker.SpawnOptions{Headers: map[string]string{"order": strconv.FormatInt(m.ID, 10)}}); err != nil {
			return worker.Move{}, err
		}
		return worker.Join("sum"), nil
	})
}

// sumStage is the join: it checks that each child is done with its result,
// in the order spawned, and records how many it read.
func sumStage(ctx context.Context, m *worker.Message) (worker.Move, error) {
	cs, err := m.Children(ctx)
	if err != nil {
		return worker.Move{}, err
	}
	ok := true
	for i, c := range cs {
		ok = ok && c.Status == "done" && c.Stage == "item" && string(c.Result) == fmt.Sprint("r", i)
	}
	if _, err := m.Tx.Exec(ctx, "INSERT INTO joined VALUES ($1, $2, $3)", m.ID, len(cs), ok); err != nil {
		return worker.Move{}, err
	}
	return worker.Finish(), nil
}

// TestGraphDispatched runs a fan-out and its join under a real dispatcher:
// each order spawns its items (none for "0"), which finish with results,
// and the join stage reads them all once the last has ended; an order
// without items goes straight on to the join.
func TestGraphDispatched(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(graphStage, "1")
	p := workertest.Start(t,
		workertest.Stage{Name: "split", Program: self, Parallelism: 2, QueueLimit: 4},
		workertest.Stage{Name: "item", Program: self, Parallelism: 2, QueueLimit: 8},
		workertest.Stage{Name: "sum", Program: self, Parallelism: 1, QueueLimit: 4})
	if _, err := p.DB.Pool.Exec(context.Background(), "CREATE TABLE joined (id bigint, n int, ok bool)"); err != nil {
		t.Fatal(err)
	}
	sizes := []int{3, 0, 7, 1, 0, 12, 5, 2}
	payloads := make([][]byte, len(sizes))
	total := 0
	for i, n := range sizes {
		payloads[i] = []byte(strconv.Itoa(n))
		total += n
	}
	ids := p.Enqueue("split", payloads...)
	p.WaitSettled(2 * time.Minute)
	for i, id := range ids {
		if r := p.Row(id); r.Status != "done" || r.Stage != "sum" || r.Attempts != 1 {
			t.Errorf("order %d (%d items): %+v, want done at sum", id, sizes[i], r)
		}
		if got := p.Int64("SELECT count(*) FROM joined WHERE id = $1 AND n = $2 AND ok", id, sizes[i]); got != 1 {
			t.Errorf("order %d: the join read %d times all its %d items done with their results, want once", id, got, sizes[i])
		}
		if got := p.Int64(`SELECT count(*) FROM pepsi.state s JOIN pepsi.message m USING (id)
			WHERE s.parent = $1 AND s.status = 'done' AND m.headers->>'order' = $1::text`, id); got != int64(sizes[i]) {
			t.Errorf("order %d: %d items done, want %d", id, got, sizes[i])
		}
	}
	if got := p.Int64("SELECT count(*) FROM pepsi.state WHERE parent IS NOT NULL"); got != int64(total) {
		t.Errorf("%d children, want %d", got, total)
	}
	p.Check()
}
