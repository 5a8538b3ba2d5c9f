package dispatch

import (
	"context"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// keys is what a stage with KEY holds: the key of each message of its in
// flight (claimed and not yet settled) that has one, and how many of each.
// The claim takes a key's messages only while fewer than KEY_LIMIT are
// held (queue.StageCap.Held); a settle gives them back.
type keys struct {
	of   map[int64]string
	held map[string]int
	buf  []queue.HeldKey // the claim's copy of held (one turn claims for a stage at a time)
	less map[string]int  // what a settle in the making frees (freeing)
	// freed: the keys given back since the stage's last claim ended
	// (fresh).
	freed map[string]struct{}
}

func newKeys() *keys {
	return &keys{of: make(map[int64]string), held: make(map[string]int), less: make(map[string]int), freed: make(map[string]struct{})}
}

// freeing counts the held messages of stage among settles, by key, for
// snapshotLess, and returns how many there are.
func (k *keys) freeing(settles []queue.Settle, stage string) int {
	clear(k.less)
	n := 0
	for i := range settles {
		if settles[i].Stage != stage {
			continue
		}
		if key, ok := k.of[settles[i].ID]; ok {
			k.less[key]++
			n++
		}
	}
	return n
}

// snapshotLess is snapshot less the keys freeing counted: what stays held
// once that settle is applied.
func (k *keys) snapshotLess() []queue.HeldKey {
	k.buf = k.buf[:0]
	for key, n := range k.held {
		if n -= k.less[key]; n > 0 {
			k.buf = append(k.buf, queue.HeldKey{Key: key, N: n})
		}
	}
	return k.buf
}

// hold books a claimed message's key (once: a message is held at most
// once).
func (k *keys) hold(id int64, key string) {
	if _, ok := k.of[id]; ok {
		return
	}
	k.of[id] = key
	k.held[key]++
}

// release gives back a settled message's key, reporting whether it had one.
func (k *keys) release(id int64) bool {
	key, ok := k.of[id]
	if !ok {
		return false
	}
	delete(k.of, id)
	k.freed[key] = struct{}{}
	if k.held[key] <= 1 {
		delete(k.held, key)
	} else {
		k.held[key]--
	}
	return true
}

// fresh reports whether a claim at stage took a message whose key it
// neither held nor was given back since the stage's last claim (or one
// without a key), and starts counting the given-back keys anew. A claim
// that took only keys a settle freed found no key to spare: its stage's
// keys, not its backlog, bound it, and its next messages come as settles
// free their keys (claimWithSettle). Call it before holdClaimed.
func (k *keys) fresh(claimed []queue.Claimed, stage string) bool {
	defer clear(k.freed)
	for i := range claimed {
		c := &claimed[i]
		if c.Stage != stage {
			continue
		}
		_, held := k.held[c.Key]
		_, freed := k.freed[c.Key]
		if !c.Keyed || !held && !freed {
			return true
		}
	}
	return false
}

// snapshot copies held for a claim: the claim lane reads it while the loop
// goes on changing held.
func (k *keys) snapshot() []queue.HeldKey {
	k.buf = k.buf[:0]
	for key, n := range k.held {
		k.buf = append(k.buf, queue.HeldKey{Key: key, N: n})
	}
	return k.buf
}

// setKeys writes the KEY of this dispatcher's stages to the database
// (queue.DB.SetFlowKeys), where ingress and settles read it.
func (d *Dispatcher) setKeys(ctx context.Context, db Store) error {
	stages := make([]string, 0, len(d.pools))
	var fks []queue.FlowKey
	for _, p := range d.pools {
		stages = append(stages, p.cfg.Name)
		if p.cfg.Keyed() {
			fks = append(fks, queue.FlowKey{Stage: p.cfg.Name, Header: p.cfg.KeyHeader, Limit: p.cfg.KeyLimit})
		}
	}
	changed, rows, err := db.SetFlowKeys(ctx, stages, fks)
	if err != nil {
		return err
	}
	if len(changed) > 0 {
		d.log.Info("KEY changed: unfinished messages re-keyed", "stages", changed, "rows", rows)
	}
	return nil
}
