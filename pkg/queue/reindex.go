package queue

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// IndexSize is what the catalog says of one B-tree index of the tables the
// dispatcher vacuums (Vacuumed), as of the last VACUUM of its table or the
// index's last build: its size, its entries then, and the size those
// entries take in a freshly built index.
//
// An emptied B-tree page is kept for reuse, never given back to the file
// system, so an index of rows that churn keeps the size of its busiest
// moment (the most entries, live and dead, between two VACUUMs); only a
// rebuild (Reindex) gives the rest back.
type IndexSize struct {
	Name    string  // schema-qualified and quoted as SQL takes it: pepsi.state_pending
	Table   string  // its table, the same way
	Size    int64   // bytes (pg_class.relpages)
	Entries float64 // its entries (pg_class.reltuples)
	Need    int64   // bytes the entries take freshly built (see need)
	// Busy: an index build (CREATE INDEX, REINDEX) runs on Table now, one
	// of another session's or a REINDEX an earlier janitor left running.
	Busy bool
}

// samplePages is about how many pages of a table IndexSizes reads, picked
// at random (TABLESAMPLE SYSTEM), to measure its variable-width key
// columns; sampleRows the most rows it reads there.
const (
	samplePages = 32
	sampleRows  = 2000
)

// unknownWidth is the width assumed for a variable-width key column no
// sampled row has a value in: on the large side, so that the need is not
// underestimated.
const unknownWidth = 32

// buildingSQL: an index build runs on the table whose oid is tbl, as far
// as this session can see (another role's build shows no table: it counts).
const buildingSQL = `EXISTS (SELECT 1 FROM pg_stat_progress_create_index p
	WHERE p.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND (p.relid = tbl OR p.relid IS NULL))`

// vacuumedOIDs are the oids of Vacuumed ($1, text[]).
const vacuumedOIDs = `(SELECT unnest($1::text[])::regclass)`

// leftover matches the names REINDEX CONCURRENTLY gives its copies: the new
// index (_ccnew, _ccnew1, ...) and the old one it swaps out (_ccold).
const leftover = `'_cc(new|old)[0-9]*$'`

// indexSizesSQL lists the valid B-tree indexes of Vacuumed at least $2
// bytes large, with each column's pg_attribute length and alignment and
// the table column it is (none: an expression).
const indexSizesSQL = `
SELECT format('%I.%I', n.nspname, ic.relname), format('%I.%I', n.nspname, t.relname),
       ic.relpages::bigint * current_setting('block_size')::bigint, ic.reltuples::float8,
       current_setting('block_size')::int, t.relpages,
       coalesce((SELECT o.option_value::int FROM pg_options_to_table(ic.reloptions) o WHERE o.option_name = 'fillfactor'), 90),
       (SELECT ` + buildingSQL + ` FROM (SELECT i.indrelid AS tbl) x),
       c.lens, c.aligns, c.cols
  FROM pg_index i
  JOIN pg_class ic ON ic.oid = i.indexrelid
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace
  JOIN pg_am am ON am.oid = ic.relam
 CROSS JOIN LATERAL (
       SELECT array_agg(a.attlen ORDER BY a.attnum) AS lens,
              array_agg(a.attalign::text ORDER BY a.attnum) AS aligns,
              array_agg(coalesce(ta.attname::text, '') ORDER BY a.attnum) AS cols
         FROM pg_attribute a
         LEFT JOIN pg_attribute ta ON ta.attrelid = i.indrelid AND ta.attnum = i.indkey[a.attnum - 1] AND ta.attnum > 0
        WHERE a.attrelid = i.indexrelid AND a.attnum > 0) c
 WHERE i.indrelid IN ` + vacuumedOIDs + `
   AND am.amname = 'btree' AND i.indisvalid AND i.indisready AND i.indislive
   AND ic.relname !~ ` + leftover + `
   AND ic.relpages::bigint * current_setting('block_size')::bigint >= $2
 ORDER BY 1`

// indexCols is one index's columns as IndexSizes reads them.
type indexCols struct {
	lens   []int16
	aligns []string
	cols   []string // the table's column, "" for an expression
	block  int
	fill   int
	pages  int64 // the table's (pg_class.relpages)
}

// IndexSizes lists the B-tree indexes of Vacuumed that are at least min
// bytes large (see IndexSize), in name order. An index whose table was
// never vacuumed nor analyzed has no entry count yet and is left out. It
// reads the catalog, and about samplePages pages of each table that has
// such an index with a variable-width column (text: a stage's name, a
// key) to measure that column's width.
func (db *DB) IndexSizes(ctx context.Context, min int64) ([]IndexSize, error) {
	rows, err := db.pool.Query(ctx, indexSizesSQL, Vacuumed, min)
	if err != nil {
		return nil, fmt.Errorf("read the indexes' sizes: %w", err)
	}
	var out []IndexSize
	var cols []indexCols
	for rows.Next() {
		var s IndexSize
		var c indexCols
		if err := rows.Scan(&s.Name, &s.Table, &s.Size, &s.Entries, &c.block, &c.pages, &c.fill, &s.Busy, &c.lens, &c.aligns, &c.cols); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the indexes' sizes: %w", err)
		}
		if s.Entries < 0 { // never counted
			continue
		}
		out, cols = append(out, s), append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the indexes' sizes: %w", err)
	}
	widths, err := db.columnWidths(ctx, out, cols)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Need = need(out[i].Entries, cols[i], widths[out[i].Table])
	}
	return out, nil
}

// columnWidths measures the variable-width columns that the indexes of
// sizes have: table -> column -> average stored bytes (absent: no sampled
// row has a value).
func (db *DB) columnWidths(ctx context.Context, sizes []IndexSize, cols []indexCols) (map[string]map[string]float64, error) {
	want := map[string][]string{}
	pages := map[string]int64{}
	for i, s := range sizes {
		pages[s.Table] = cols[i].pages
		for k, l := range cols[i].lens {
			if c := cols[i].cols[k]; l < 0 && c != "" && !slices.Contains(want[s.Table], c) {
				want[s.Table] = append(want[s.Table], c)
			}
		}
	}
	out := map[string]map[string]float64{}
	for table, names := range want {
		sel := make([]string, len(names))
		avg := make([]string, len(names))
		for k, c := range names {
			sel[k] = pgx.Identifier{c}.Sanitize()
			avg[k] = "avg(pg_column_size(" + sel[k] + "))::float8"
		}
		got := make([]*float64, len(names))
		dst := make([]any, len(names))
		for k := range got {
			dst[k] = &got[k]
		}
		// table is format('%I.%I') of a catalog name: quoted already.
		q := fmt.Sprintf("SELECT %s FROM (SELECT %s FROM %s TABLESAMPLE SYSTEM ($1) LIMIT %d) s",
			strings.Join(avg, ", "), strings.Join(sel, ", "), table, sampleRows)
		pct := 100.0
		if p := pages[table]; p > samplePages {
			pct = 100 * samplePages / float64(p)
		}
		if err := db.pool.QueryRow(ctx, q, pct).Scan(dst...); err != nil {
			return nil, fmt.Errorf("measure %s's key columns: %w", table, err)
		}
		out[table] = map[string]float64{}
		for k, c := range names {
			if got[k] != nil {
				out[table][c] = *got[k]
			}
		}
	}
	return out, nil
}

// need is how many bytes entries take in a B-tree index freshly built with
// c's columns (widths: the variable-width ones' average), the way the
// server lays them out: leaf pages filled to the fillfactor, each entry an
// 8-byte header and its columns, aligned as the server aligns them,
// rounded up to 8, and a 4-byte line pointer; a page's 24-byte header and
// 16 bytes of B-tree data are not for entries. The metapage and a root
// are added; the other inner pages, a percent or so, are not.
func need(entries float64, c indexCols, widths map[string]float64) int64 {
	off := 8.0
	for k, l := range c.lens {
		w, align := float64(l), alignment(c.aligns[k])
		if l < 0 {
			w = unknownWidth
			if v, ok := widths[c.cols[k]]; ok && c.cols[k] != "" {
				w = v
			}
			if w < 127 {
				align = 1 // a short value (a 1-byte length) is not aligned
			}
		}
		off = alignUp(off, align) + w
	}
	entry := alignUp(off, 8) + 4
	perPage := float64(c.block-24-16) * float64(c.fill) / 100
	return int64(math.Ceil(entries*entry/perPage)+2) * int64(c.block)
}

// alignment is the bytes of a pg_attribute.attalign.
func alignment(a string) float64 {
	switch a {
	case "s":
		return 2
	case "i":
		return 4
	case "d":
		return 8
	}
	return 1
}

// alignUp rounds off up to a multiple of a.
func alignUp(off, a float64) float64 { return math.Ceil(off/a) * a }

// Reindex rebuilds index (an IndexSize's Name) with REINDEX INDEX
// CONCURRENTLY: writes to its table go on meanwhile; a VACUUM of the table
// waits for it (the dispatcher's, with SKIP_LOCKED, skips the table). It
// runs outside a transaction for as long as it takes, and returns the
// rebuilt index's size in bytes. A REINDEX that fails or is cancelled
// leaves an invalid copy behind (its name ends in _ccnew, or _ccold), which
// DropReindexLeftovers drops.
func (db *DB) Reindex(ctx context.Context, index string) (int64, error) {
	var name string
	err := db.pool.QueryRow(ctx, `SELECT format('%I.%I', n.nspname, c.relname)
		  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE i.indexrelid = to_regclass($2) AND i.indrelid IN `+vacuumedOIDs, Vacuumed, index).Scan(&name)
	if err == pgx.ErrNoRows {
		return 0, fmt.Errorf("reindex %s: not an index of pepsi's tables", index)
	}
	if err != nil {
		return 0, fmt.Errorf("reindex %s: %w", index, err)
	}
	if _, err := db.pool.Exec(ctx, "REINDEX INDEX CONCURRENTLY "+name); err != nil {
		return 0, fmt.Errorf("reindex %s: %w", name, err)
	}
	var size int64
	if err := db.pool.QueryRow(ctx, "SELECT pg_relation_size(to_regclass($1))", name).Scan(&size); err != nil {
		return 0, fmt.Errorf("reindex %s: read its size: %w", name, err)
	}
	return size, nil
}

// DropReindexLeftovers drops the invalid copies that a REINDEX CONCURRENTLY
// of an index of Vacuumed left when it failed or was cancelled (a
// dispatcher stopped in the middle of one, say): useless for queries, yet
// written on every insert. A table on which an index build runs now is
// left alone (the copy may be that build's). It returns the names it
// dropped.
func (db *DB) DropReindexLeftovers(ctx context.Context) ([]string, error) {
	rows, err := db.pool.Query(ctx, `
SELECT format('%I.%I', n.nspname, ic.relname)
  FROM pg_index i
  JOIN pg_class ic ON ic.oid = i.indexrelid
  JOIN pg_namespace n ON n.oid = ic.relnamespace
 WHERE i.indrelid IN `+vacuumedOIDs+`
   AND NOT (i.indisvalid AND i.indisready) AND ic.relname ~ `+leftover+`
   AND NOT (SELECT `+buildingSQL+` FROM (SELECT i.indrelid AS tbl) x)
 ORDER BY 1`, Vacuumed)
	if err != nil {
		return nil, fmt.Errorf("look for invalid indexes: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look for invalid indexes: %w", err)
	}
	var dropped []string
	for _, name := range names {
		if _, err := db.pool.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+name); err != nil {
			return dropped, fmt.Errorf("drop the invalid index %s: %w", name, err)
		}
		dropped = append(dropped, name)
	}
	return dropped, nil
}
