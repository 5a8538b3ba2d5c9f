package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestPrintTable: columns two blanks apart, as wide as their widest cell
// on a terminal (a wide character takes two columns, a combining mark
// none), each cell escaped and kept as it is, no blank at a line's end.
func TestPrintTable(t *testing.T) {
	var b strings.Builder
	err := printTable(&b, []string{"STAGE", "KEY", "N"}, [][]string{
		{"parse", "日本語", "1"},
		{"store-long", "e\u0301x", ""},
		{"  lead", "\x1b[2J", "22"},
		{"😀", "ｆｕｌｌ", "tail  "},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"STAGE       KEY       N\n" +
		"parse       日本語    1\n" +
		"store-long  e\u0301x\n" +
		"  lead      \\x1b[2J   22\n" +
		"😀          ｆｕｌｌ  tail\n"
	if b.String() != want {
		t.Errorf("printTable:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := printTable(&b, []string{"VERSION", "NAME"}, nil); err != nil || b.String() != "VERSION  NAME\n" {
		t.Errorf("printTable of no rows: %q, %v", b.String(), err)
	}
	if err := printTable(failingWriter{}, []string{"A"}, nil); err == nil {
		t.Error("printTable on a writer that fails: no error")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestTableBatches: a table written in batches keeps the columns of the
// first, and a later batch with a wider cell prints it whole, its
// columns widened from there on.
func TestTableBatches(t *testing.T) {
	var b strings.Builder
	tab := newTable(&b, []string{"ID", "STAGE", "ERROR"})
	for _, rows := range [][][]string{
		{{"998", "a", "-"}, {"999", "a", "-"}},
		{{"1000", "a", "-"}, {"1001", "parse-long", "stage said no"}},
		{{"1002", "a", "-"}},
		nil,
	} {
		if err := tab.write(rows); err != nil {
			t.Fatal(err)
		}
	}
	want := `ID   STAGE  ERROR
998  a      -
999  a      -
1000  a           -
1001  parse-long  stage said no
1002  a           -
`
	if b.String() != want {
		t.Errorf("table in batches:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestQueueLsAligns: ls lines its columns up on a terminal when a key
// holds wide characters.
func TestQueueLsAligns(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	ids := seedQueue(t, db, "parse", queue.Pending, 2)
	sqlExec(t, db, "UPDATE pepsi.state SET dedup_key = $2 WHERE id = $1", ids[0], "日本語の鍵")
	sqlExec(t, db, "UPDATE pepsi.state SET dedup_key = $2 WHERE id = $1", ids[1], "k")
	r := pepsi(t, "", "queue", "ls")
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("ls:\n%s", r.stdout)
	}
	// The line as a terminal shows it: a wide character takes two cells.
	cells := func(line string) []rune {
		var c []rune
		for _, r := range line {
			c = append(c, r)
			if r >= 0x3000 {
				c = append(c, 0)
			}
		}
		return c
	}
	age := len(cells(lines[0][:strings.Index(lines[0], " AGE ")+1]))
	for _, l := range lines[1:] {
		c := cells(l)
		if len(c) < age+2 || c[age-1] != ' ' || string(c[age:age+2]) != "0s" && string(c[age:age+2]) != "1s" {
			t.Errorf("ls: no age under AGE (column %d) in %q:\n%s", age, l, r.stdout)
		}
	}
}
