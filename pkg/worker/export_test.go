package worker

import "time"

// SetMaxHold changes how long answers to pipelined ids may be held, until
// the returned function restores it.
func SetMaxHold(d time.Duration) (restore func()) {
	old := maxHold
	maxHold = d
	return func() { maxHold = old }
}
