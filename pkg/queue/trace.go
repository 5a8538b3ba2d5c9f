package queue

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// The traced claim is the claim with three columns more for each claimed
// row: its attempt at the stage, and its trace context, what its headers
// hold under traceparent and tracestate, joined by a blank (a traceparent
// has none), read with one probe of pepsi.message by id. A dispatcher
// runs it only while TRACING is on: the claim of one that does not trace
// is the same statement, byte for byte, and reads no header.
var (
	claimTracedSQL      = tracedClaim(claimSQL)
	claimKeyedTracedSQL = tracedClaim(claimKeyedSQL)
)

// tracedClaims maps each claim statement to its traced form.
var tracedClaims = map[string]string{claimSQL: claimTracedSQL, claimKeyedSQL: claimKeyedTracedSQL}

// claimTraceSQL is what the traced claim's UPDATE returns besides.
const claimTraceSQL = `, s.attempts,
              (SELECT concat_ws(' ', m.headers ->> 'traceparent', m.headers ->> 'tracestate')
                 FROM pepsi.message m WHERE m.id = s.id) AS trace`

// tracedClaim returns claim with the trace columns; it panics when the
// claim's shape changed under it (a test builds every form).
func tracedClaim(claim string) string {
	return mustReplace(mustReplace(mustReplace(claim,
		"coalesce(s.parent, 0) AS parent\n)", "coalesce(s.parent, 0) AS parent"+claimTraceSQL+"\n)"),
		"0::bigint FROM picked", "0::bigint, 0, NULL::text FROM picked"),
		"parent FROM upd", "parent, attempts, trace FROM upd")
}

func mustReplace(s, old, new string) string {
	if strings.Count(s, old) != 1 {
		panic("queue: the claim statement changed: " + old)
	}
	return strings.Replace(s, old, new, 1)
}

// traced returns the traced form of a claim statement.
func traced(stmt string) string {
	if t, ok := tracedClaims[stmt]; ok {
		return t
	}
	return stmt
}

// scanClaim scans one row of a claim, traced or not, into c and key.
func scanClaim(rows pgx.Rows, c *Claimed, key **string) error {
	if len(rows.FieldDescriptions()) == 6 {
		return rows.Scan(&c.ID, &c.Stage, &c.Priority, key, &c.Waited, &c.Parent)
	}
	var tr *string
	err := rows.Scan(&c.ID, &c.Stage, &c.Priority, key, &c.Waited, &c.Parent, &c.Attempt, &tr)
	if tr != nil {
		c.Trace = *tr
	}
	return err
}
