package app

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// strandedShown is how many ids of stranded parents the joins check names.
const strandedShown = 20

// checkJoins fails when parents wait at a join with no open child and
// nothing changed for a while (admin.Stranded): no settle will release
// them. It must never happen. Waiting parents at a stage no section
// configures are the stages check's (admin.UnconfiguredIn).
func checkJoins(d *doctor) doctorResult {
	ids, n, err := d.db.Stranded(d.ctx, strandedShown)
	if err != nil {
		return broken(err)
	}
	if n == 0 {
		js, err := d.db.Joins(d.ctx)
		if err != nil {
			return broken(err)
		}
		if len(js) == 0 {
			return ok("no parent waits at a join", nil)
		}
		var parts []string
		for _, j := range js {
			kids := "children"
			if j.Children == 1 {
				kids = "child"
			}
			parts = append(parts, fmt.Sprintf("%s at %s (%d open %s)", plural(j.Parents, "parent"), j.Stage, j.Children, kids))
		}
		return ok("waiting: "+strings.Join(parts, ", ")+"; each has an open child", js)
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	list := strings.Join(s, ", ")
	if n > int64(len(ids)) {
		list += ", ..."
	}
	return fail(fmt.Sprintf("%s waiting at a join with no open child for over %s (%s): nothing will release %s; this is a bug",
		plural(n, "parent"), admin.StrandedGrace, list, map[bool]string{true: "it", false: "them"}[n == 1]),
		"release them with SELECT * FROM pepsi.joins(ARRAY["+strings.Join(s, ",")+"]), and report it").with(ids)
}
