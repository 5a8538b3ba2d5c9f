package dispatch

import (
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestSettleCarriesClaim: a settle that frees keys of a keyed stage carries
// that stage's claim, with the freed keys no longer held; meanwhile the
// claim lane claims for other stages only; its result hands the claimed
// messages out, and a claim that found less than its cap leaves no claim
// due. A settle that frees no key, or one made while the claim lane claims
// for its stage, goes alone.
func TestSettleCarriesClaim(t *testing.T) {
	u := newUnitConf(t, strings.Replace(unitConf, "QUEUE_LIMIT = 4\n", "QUEUE_LIMIT = 4\nKEY = header:customer\nKEY_LIMIT = 1\n", 1))
	a := u.byName["a"]
	u.plan.waker.start(u.at)
	// A fake worker: a started one's writer would take its feed before
	// fed could read it.
	w := u.worker("a")
	claimed := []queue.Claimed{{ID: 1, Stage: "a", Key: "x", Keyed: true}, {ID: 2, Stage: "a", Key: "y", Keyed: true}}
	u.plan.holdClaimed(claimed) // as the claim's result does
	u.handOut(claimed, u.at)
	fed(w)
	u.answers(w, []protocol.Status{{}}) // 1 done: x is freed by its settle
	u.startSettle(u.at)
	j := u.sent(&u.settler)
	if len(j.turn.Caps) != 1 {
		t.Fatalf("the settle carries caps %+v, want a's", j.turn.Caps)
	}
	c := j.turn.Caps[0]
	if c.Stage != "a" || c.KeyLimit != 1 || c.Cap != a.capacity(u.at) || len(c.Held) != 1 || c.Held[0] != (queue.HeldKey{Key: "y", N: 1}) {
		t.Fatalf("cap %+v, want a's room with y held and x not", c)
	}
	// The claim lane claims for the other stages meanwhile, not for a.
	a.plan.more, u.plan.byName["b"].more = true, true
	u.startClaim(u.at)
	if cj := u.sent(&u.claimer); len(cj.turn.Caps) != 1 || cj.turn.Caps[0].Stage != "b" {
		t.Fatalf("the claim beside the settle has caps %+v, want b's only", cj.turn.Caps)
	} else {
		cj.res = queue.TurnResult{}
		u.finishJob(cj, u.at)
	}

	// The settle moved 1 on; the claim took x's next message, 3.
	j.res.Settled = []queue.Settled{{ID: 1, Handed: "a", Stage: "b", After: queue.Pending}}
	j.res.Claimed = []queue.Claimed{{ID: 3, Stage: "a", Key: "x", Keyed: true}}
	u.finishJob(j, u.at)
	if a.plan.settling {
		t.Fatal("a is still claimed for by the settle")
	}
	if a.plan.keys.held["x"] != 1 || a.plan.keys.held["y"] != 1 || a.plan.keys.of[3] != "x" {
		t.Fatalf("held %v of %v, want x (3) and y", a.plan.keys.held, a.plan.keys.of)
	}
	if got := fed(w); got != "3\n" {
		t.Fatalf("3 was not handed to a worker: fed %q", got)
	}
	if a.plan.more {
		t.Error("a claim that found less than its cap left a claim due at its stage")
	}

	// A settle of a keyless stage's answer frees no key: it goes alone.
	wb := u.worker("b", 20)
	u.answers(wb, []protocol.Status{{}})
	u.plan.settleNow = true
	u.startSettle(u.at)
	if j := u.sent(&u.settler); len(j.turn.Caps) != 0 {
		t.Fatalf("a settle that frees no key carries caps %+v", j.turn.Caps)
	} else {
		u.finishJob(j, u.at)
	}

	// With a claim in flight for a, the settle goes alone.
	u.claimJob(map[string]int{"a": 1}, nil)
	u.answers(w, []protocol.Status{{}}) // 2 done: frees y
	u.startSettle(u.at)
	if j := u.sent(&u.settler); len(j.turn.Caps) != 0 {
		t.Fatalf("a settle made while a claim for its stage is in flight carries caps %+v", j.turn.Caps)
	}
}
