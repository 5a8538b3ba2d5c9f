package contrib_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/worker/workertest"
)

// readmeBlock returns the first ```lang block of README's section heading.
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, rest, ok := strings.Cut(sec, "```"+lang+"\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("README.md's %q has no %s block", heading, lang)
	}
	return block
}

// TestReadmeGraph runs README's "Fan-out and fan-in" under a real
// dispatcher: its Go and Python code are contrib/go/orderlines and
// contrib/python/invoice.py, word for word; each order is split into its
// lines, priced, and joined into one invoice with their total, an order
// without lines at once.
func TestReadmeGraph(t *testing.T) {
	t.Parallel()
	for file, lang := range map[string]string{"go/orderlines/main.go": "go", "python/invoice.py": "python"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if block := readmeBlock(t, "## Fan-out and fan-in", lang); !strings.Contains(string(src), block) {
			t.Errorf("README's %s block is not in %s:\n%s", lang, file, block)
		}
	}
	py, _ := pythonVenv(t)
	invoice, err := filepath.Abs("python/invoice.py")
	if err != nil {
		t.Fatal(err)
	}
	lines := testkit.Build(t, "github.com/pepsi-dev/pepsi/contrib/go/orderlines")
	p := workertest.Start(t,
		workertest.Stage{Name: "split", Program: lines, Parallelism: 1, QueueLimit: 4},
		workertest.Stage{Name: "price", Program: lines, Parallelism: 2, QueueLimit: 8},
		workertest.Stage{Name: "invoice", Program: py + " " + invoice, Parallelism: 1, QueueLimit: 4})
	if _, err := p.DB.Pool.Exec(context.Background(), `
		CREATE TABLE prices (sku text PRIMARY KEY, cents bigint);
		INSERT INTO prices VALUES ('A-1', 250), ('B-2', 1000), ('C-3', 5);
		CREATE TABLE invoices (order_id bigint PRIMARY KEY, total bigint, lines int, failed int)`); err != nil {
		t.Fatal(err)
	}
	orders := []struct {
		order        string
		total, lines int64
	}{
		{`{"lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}]}`, 1500, 2},
		{`{"lines": []}`, 0, 0},
		{`{"lines": [{"sku": "C-3", "qty": 7}, {"sku": "C-3", "qty": 1}, {"sku": "A-1", "qty": 4}]}`, 1040, 3},
	}
	payloads := make([][]byte, len(orders))
	for i, o := range orders {
		payloads[i] = []byte(o.order)
	}
	ids := p.Enqueue("split", payloads...)
	p.WaitSettled(2 * time.Minute)
	for i, id := range ids {
		if r := p.Row(id); r.Status != "done" || r.Stage != "invoice" {
			t.Errorf("order %d: %+v, want done at invoice", id, r)
		}
		o := orders[i]
		if n := p.Int64("SELECT count(*) FROM invoices WHERE order_id = $1 AND total = $2 AND lines = $3 AND failed = 0", id, o.total, o.lines); n != 1 {
			t.Errorf("order %d: no invoice of %d for %d lines", id, o.total, o.lines)
		}
	}
	p.Check()
	if t.Failed() {
		t.Logf("dispatcher log:\n%s", p.Logs)
	}
}
