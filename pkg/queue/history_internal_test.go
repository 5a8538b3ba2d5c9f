package queue

import (
	"strconv"
	"strings"
	"testing"

	schema "github.com/pepsi-dev/pepsi/sql"
)

// TestHistoryArgsNoFailures: a turn whose settles hold no failed pass
// queues no history statement and allocates nothing for it.
func TestHistoryArgsNoFailures(t *testing.T) {
	vs := []Settle{
		{ID: 1, Stage: "s", Verdict: PassOK},
		{ID: 2, Stage: "s", Verdict: Advance, Next: "t"},
		{ID: 3, Stage: "s", Verdict: Finish},
		{ID: 4, Stage: "s", Verdict: NotRun},
	}
	if a := historyArgs(vs); a != nil {
		t.Fatalf("historyArgs without failures = %v, want nil", a)
	}
	if n := testing.AllocsPerRun(100, func() { historyArgs(vs) }); n != 0 {
		t.Fatalf("historyArgs without failures: %v allocations", n)
	}
	vs = append(vs, Settle{ID: 5, Stage: "s", Verdict: PassFailed, Reason: "r", Kind: FailCrash, PID: 9})
	a := historyArgs(vs)
	if a == nil || len(a[0].([]int64)) != 1 || a[2].([]string)[0] != "crash" || a[4].([]int32)[0] != 9 {
		t.Fatalf("historyArgs with one failure = %v", a)
	}
}

// TestHistoryConstants: historySQL keeps the exported bounds.
func TestHistoryConstants(t *testing.T) {
	if historyKeep != strconv.Itoa(HistoryKeep) || historyReasonMax != strconv.Itoa(HistoryReasonMax) {
		t.Fatalf("historySQL's bounds %s, %s differ from HistoryKeep %d, HistoryReasonMax %d",
			historyKeep, historyReasonMax, HistoryKeep, HistoryReasonMax)
	}
	ddl, err := schema.Files.ReadFile("019_history.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []FailKind{FailAnswer, FailCrash, FailTimeout, FailProtocol} {
		if !strings.Contains(string(ddl), "'"+k.String()+"'") {
			t.Errorf("kind %q is not in pepsi.history's CHECK", k)
		}
	}
}

// BenchmarkHistoryArgsNoFailures is what the history costs a settle of 64
// verdicts without a failed pass: the look for one.
func BenchmarkHistoryArgsNoFailures(b *testing.B) {
	vs := make([]Settle, 64)
	for i := range vs {
		vs[i] = Settle{ID: int64(i), Stage: "s", Verdict: Advance, Next: "t"}
	}
	b.ReportAllocs()
	for b.Loop() {
		if historyArgs(vs) != nil {
			b.Fatal("history arguments without a failure")
		}
	}
}
