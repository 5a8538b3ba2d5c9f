package dispatch

import (
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestKeysFresh: a keyed stage's claim is a sign of more only when it took
// a key it neither held nor had just given back (or a message without a
// key); each claim starts the count of given-back keys anew.
func TestKeysFresh(t *testing.T) {
	k := newKeys()
	k.hold(1, "x")
	k.hold(2, "y")
	k.release(1) // x given back by a settle
	keyed := func(id int64, stage, key string) []queue.Claimed {
		return []queue.Claimed{{ID: id, Stage: stage, Key: key, Keyed: true}}
	}
	if k.fresh(keyed(3, "s", "x"), "s") {
		t.Error("a claim of the key a settle just freed was taken as a sign of more")
	}
	if k.fresh(keyed(4, "s", "y"), "s") {
		t.Error("a claim of a held key was taken as a sign of more")
	}
	if !k.fresh(keyed(5, "s", "z"), "s") {
		t.Error("a claim of a key neither held nor freed was not a sign of more")
	}
	if !k.fresh([]queue.Claimed{{ID: 6, Stage: "s"}}, "s") {
		t.Error("a claim of a message without a key was not a sign of more")
	}
	if k.fresh(keyed(7, "t", "z"), "s") {
		t.Error("another stage's claimed message counted")
	}
	// x was given back before the claims above: no longer counted.
	if !k.fresh(keyed(8, "s", "x"), "s") {
		t.Error("a key given back before the last claim still counts as just freed")
	}
	if len(k.freed) != 0 {
		t.Errorf("freed keeps %d keys after a claim, want none", len(k.freed))
	}
}

// TestFinishClaimKeysFew: a keyed stage's claim that fills its cap with
// the keys its settles just gave back is no sign of more (its next
// messages come with the settles that free their keys); one that takes a
// key it never held is.
func TestFinishClaimKeysFew(t *testing.T) {
	u := newUnit(t)
	u.worker("a")
	p := u.byName["a"]
	p.plan.keys = newKeys()
	p.plan.keys.hold(1, "x")
	p.plan.keys.release(1) // a settle gave x back
	keyed := func(got ...queue.Claimed) *job {
		j := u.claimJob(map[string]int{"a": len(got)}, nil)
		j.res.Claimed = append(j.res.Claimed, got...)
		return j
	}
	u.finishJob(keyed(queue.Claimed{ID: 2, Stage: "a", Key: "x", Keyed: true}), u.at)
	if p.plan.filled || p.plan.more {
		t.Errorf("a claim of the key a settle freed: filled %v, more %v; want neither", p.plan.filled, p.plan.more)
	}
	u.finishJob(keyed(queue.Claimed{ID: 3, Stage: "a", Key: "y", Keyed: true}), u.at)
	if !p.plan.filled || !p.plan.more {
		t.Errorf("a claim of a key never held: filled %v, more %v; want both", p.plan.filled, p.plan.more)
	}
}
