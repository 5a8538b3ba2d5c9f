package admin

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Graphs (schema 26) as the operator sees them: a message's parent and
// children, the parents that wait at a join, and the ones that wait with
// no child left open (which must never happen). Every read goes through
// the indexes the schema made for them: state_parent (the children of a
// message, on every partition) and state_waiting (the waiting parents), so
// that none of them scans the queue.

// Relative is a message's parent, as its child shows it.
type Relative struct {
	ID     int64        `json:"id"`
	Stage  string       `json:"stage,omitempty"`
	Status queue.Status `json:"status,omitempty"`
	// Gone: the parent no longer exists (purged, or deleted by retention).
	Gone bool `json:"gone,omitempty"`
}

// Children are a message's children counted by status, with the ids of a
// few of them.
type Children struct {
	Total    int64                  `json:"total"`
	ByStatus map[queue.Status]int64 `json:"by_status"`
	// Open are the lowest ids among the open ones (live: pending, running,
	// paused, held or waiting), Failed among the failed ones; at most
	// FewChildren of each.
	Open   []int64 `json:"open,omitempty"`
	Failed []int64 `json:"failed,omitempty"`
}

// Result is what the stage that finished a message left (pepsi.finish's
// p_result): its size and first bytes.
type Result struct {
	Size int64  `json:"size"`
	Head []byte `json:"-"`
}

// FewChildren is how many ids of open and of failed children Show names.
const FewChildren = 5

// ResultHead is how many bytes of a result Show reads.
const ResultHead = 4 << 10

// family fills in m's parent, children and result.
func (db *DB) family(ctx context.Context, m *Message) error {
	var parent *int64
	var pStage, pStatus *string
	var size *int64
	var head []byte
	err := db.pool.QueryRow(ctx, `
SELECT s.parent, p.stage, p.status, octet_length(s.result), substring(s.result FROM 1 FOR $2)
  FROM pepsi.state s LEFT JOIN pepsi.state p ON p.id = s.parent
 WHERE s.id = $1`, m.ID, ResultHead).Scan(&parent, &pStage, &pStatus, &size, &head)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if parent != nil {
		m.Parent = &Relative{ID: *parent, Gone: pStage == nil}
		if pStage != nil {
			m.Parent.Stage, m.Parent.Status = *pStage, queue.Status(*pStatus)
		}
	}
	if size != nil {
		m.Result = &Result{Size: *size, Head: head}
	}
	m.Children, err = db.children(ctx, m.ID)
	return err
}

// children counts the children of id by status (nil when it has none)
// and names a few open and failed ones.
func (db *DB) children(ctx context.Context, id int64) (*Children, error) {
	rows, err := db.pool.Query(ctx, `SELECT status, count(*) FROM pepsi.state WHERE parent = $1 GROUP BY status`, id)
	if err != nil {
		return nil, err
	}
	c := &Children{ByStatus: map[queue.Status]int64{}}
	var st string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		c.ByStatus[queue.Status(st)] = n
		c.Total += n
		return nil
	}); err != nil {
		return nil, err
	}
	if c.Total == 0 {
		return nil, nil
	}
	few := func(table string) ([]int64, error) {
		rows, err := db.pool.Query(ctx, `SELECT id FROM `+table+` WHERE parent = $1 ORDER BY id LIMIT $2`, id, FewChildren)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if c.Open, err = few("pepsi.state_live"); err != nil {
		return nil, err
	}
	if c.ByStatus[queue.Failed] > 0 {
		c.Failed, err = few("pepsi.state_failed")
	}
	return c, err
}

// JoinCount is the parents waiting at one join stage, and their children
// that are still open.
type JoinCount struct {
	Stage    string `json:"stage"`
	Parents  int64  `json:"parents"`
	Children int64  `json:"open_children"`
}

// Joins counts the parents waiting at each join stage and their open
// children, by stage: the waiting ones by state_waiting, each one's live
// children by state_parent.
func (db *DB) Joins(ctx context.Context) ([]JoinCount, error) {
	rows, err := db.pool.Query(ctx, `
SELECT w.stage, count(*), coalesce(sum(o.n), 0)::bigint
  FROM pepsi.state_live w
 CROSS JOIN LATERAL (SELECT count(*) AS n FROM pepsi.state_live c WHERE c.parent = w.id) o
 WHERE w.status = 'waiting'
 GROUP BY w.stage ORDER BY w.stage`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (JoinCount, error) {
		var j JoinCount
		err := r.Scan(&j.Stage, &j.Parents, &j.Children)
		return j, err
	})
}

// StrandedGrace is how long a waiting parent without an open child may
// wait before Stranded names it: the end of its last child is settled,
// and the parent released, by the dispatcher's settle after the child's
// stage has committed, a moment later.
const StrandedGrace = "1 minute"

// Stranded returns the parents that wait at a join with their own pass
// settled (handed IS NULL) and no open child, none of them changed within
// StrandedGrace (the parent nor any child): nothing will release them. It
// must never happen; pepsi.joins(ids) releases them. At most limit ids,
// lowest first, and how many there are.
func (db *DB) Stranded(ctx context.Context, limit int) ([]int64, int64, error) {
	rows, err := db.pool.Query(ctx, `
SELECT w.id, count(*) OVER ()
  FROM pepsi.state_live w
 WHERE w.status = 'waiting' AND w.handed IS NULL
   AND w.updated_at < now() - interval '`+StrandedGrace+`'
   AND NOT EXISTS (SELECT FROM pepsi.state_live c WHERE c.parent = w.id)
   AND NOT EXISTS (SELECT FROM pepsi.state c WHERE c.parent = w.id AND c.updated_at >= now() - interval '`+StrandedGrace+`')
 ORDER BY w.id LIMIT $1`, limit)
	if err != nil {
		return nil, 0, err
	}
	var ids []int64
	var id, n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		ids = append(ids, id)
		return nil
	})
	return ids, n, err
}

// ResultOf returns the whole result of one message (nil when its stage
// left none), or ErrNotFound.
func (db *DB) ResultOf(ctx context.Context, id int64) ([]byte, error) {
	var r []byte
	err := db.pool.QueryRow(ctx, "SELECT result FROM pepsi.state WHERE id = $1", id).Scan(&r)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return r, err
}
