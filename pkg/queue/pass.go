package queue

import "context"

// PassTokens hands out a dispatcher's pass tokens (Turn.Pass): its run's
// number, taken from pepsi.pass_run when it starts, times 2^40, plus a
// count of its claims. No two claims of any run share one, and a claim a
// server crash lost (claims commit without waiting for their flush) is
// never given again: the count only grows, and the run's number was
// committed durably. Only the dispatcher's loop goroutine uses it.
type PassTokens struct {
	base, n int64
}

// passRunBits is how many bits of a token count a run's claims: 2^40 of
// them, decades of claims at thousands a second.
const passRunBits = 40

// NewPassTokens takes a run number for a dispatcher's tokens.
func (db *DB) NewPassTokens(ctx context.Context) (PassTokens, error) {
	var run int64
	err := Retry(ctx, func() error {
		return db.pool.QueryRow(ctx, "SELECT nextval('pepsi.pass_run')").Scan(&run)
	})
	if err != nil {
		return PassTokens{}, err
	}
	return PassTokens{base: run << passRunBits}, nil
}

// Next returns a token no claim has used.
func (t *PassTokens) Next() int64 {
	t.n++
	return t.base + t.n
}
