package app

import (
	"strconv"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestDoctorJoins: the joins check counts the waiting parents, and fails,
// naming them, on parents that wait with no open child once a while has
// passed.
func TestDoctorJoins(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	doctorJSON(t).want(t, "joins", statusOK, "no parent waits at a join")
	parent, kids := graphOf(t, db, 2)
	doctorJSON(t).want(t, "joins", statusOK, "1 parent at merge (2 open children)")

	sqlExec(t, db, "UPDATE pepsi.state SET status = 'done' WHERE id = ANY($1)", kids)
	doctorJSON(t).want(t, "joins", statusOK) // the dispatcher's settle may be on its way
	sqlExec(t, db, "UPDATE pepsi.state SET updated_at = now() - interval '5 minutes' WHERE id = $1 OR parent = $1", parent)
	id := strconv.FormatInt(parent, 10)
	doctorJSON(t).want(t, "joins", statusFail, "1 parent waiting at a join with no open child", "("+id+")", "pepsi.joins(ARRAY["+id+"])")
}
