package queue_test

import (
	"context"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// BenchmarkRunTurn times one cycle of a dispatcher's two lanes, fenced,
// through RunTurn: the claim lane's turn (write the wake flag, resume,
// read the horizon, admit, claim; caps 16 for 3 stages) and the settle
// lane's turn that settles what it claimed (one pass failed, one paused
// for no time, the others advanced to the next stage, round the three), so
// every statement a turn can send runs each cycle.
//
//	go test -run '^$' -bench BenchmarkRunTurn -benchmem ./pkg/queue/
func BenchmarkRunTurn(b *testing.B) {
	db, dsn := newBenchDB(b)
	ctx := context.Background()
	// Each cycle fails one message for good: room for as many cycles as a
	// benchmark runs.
	seedBulk(b, db, 30_000, 0)
	l, err := queue.Dial(ctx, dsn, "c")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(ctx)
	token := queue.NewToken()
	if err := l.TakeStages(ctx, benchStages, false, token); err != nil {
		b.Fatal(err)
	}
	db.SetFence(token, benchStages)

	caps := make([]queue.StageCap, len(benchStages))
	next := map[string]string{}
	for i, s := range benchStages {
		caps[i] = queue.StageCap{Stage: s, Cap: int(benchCaps[i])}
		next[s] = benchStages[(i+1)%len(benchStages)]
	}
	claimTurn := queue.Turn{Arm: queue.ArmOn, Resume: true, Stages: benchStages, Set: "bench",
		Snapshot: true, Admit: true, Caps: caps}
	var claimRes, settleRes queue.TurnResult
	var settles []queue.Settle
	for b.Loop() {
		if err := db.RunTurn(ctx, claimTurn, &claimRes); err != nil {
			b.Fatal(err)
		}
		if len(claimRes.Claimed) < 3 {
			b.Fatalf("claimed %d messages", len(claimRes.Claimed))
		}
		settles = settles[:0]
		for _, c := range claimRes.Claimed {
			settles = append(settles, queue.Settle{ID: c.ID, Stage: c.Stage, Verdict: queue.Advance, Next: next[c.Stage]})
		}
		settles[0].Verdict = queue.Pause
		last := &settles[len(settles)-1]
		last.Verdict, last.Reason, last.Kind = queue.PassFailed, "bench", queue.FailAnswer
		if err := db.RunTurn(ctx, queue.Turn{Stages: benchStages, Settles: settles}, &settleRes); err != nil {
			b.Fatal(err)
		}
		if len(settleRes.Settled) != len(settles) {
			b.Fatalf("settled %d of %d messages", len(settleRes.Settled), len(settles))
		}
	}
}
