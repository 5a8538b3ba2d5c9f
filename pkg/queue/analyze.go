package queue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Staleness is what the server's statistics say of how stale one of
// pepsi's tables' planner statistics (its ANALYZE) are.
type Staleness struct {
	Table string // pepsi.NAME, NAME unquoted
	// Partitioned is a partitioned table: the server's autovacuum never
	// analyzes one, and ANALYZE of one also analyzes its partitions.
	Partitioned bool
	// Autovacuum says the server's autovacuum analyzes the table: it is
	// on (autovacuum and track_counts) and the table's autovacuum_enabled
	// is not false. Never so for a partitioned table.
	Autovacuum bool
	// Threshold is the number of changed rows past which the server's
	// autovacuum would analyze the table: its autovacuum_analyze_threshold
	// plus autovacuum_analyze_scale_factor of its rows at the last ANALYZE
	// (the table's own storage parameters, else the server's).
	Threshold float64
	// Changed is, for a table, the rows changed since its last ANALYZE
	// (n_mod_since_analyze); for a partitioned table, the rows its
	// partitions ever inserted, updated and deleted (since the server's
	// statistics were reset), which only tells a change by its difference.
	Changed int64
	// Rows is the table's rows at its last ANALYZE (0 if never), and Live
	// its live rows now (for a partitioned table, its partitions').
	Rows, Live float64
	// Analyzed says the table was ever analyzed, and LastAnalyzed when
	// it last was (by anyone: pepsi, autovacuum, an operator; zero if
	// never or unknown).
	Analyzed     bool
	LastAnalyzed time.Time
}

// stalenessSQL reads the statistics of every table of the pepsi schema:
// the tables and partitions from pg_stat_user_tables, and each partitioned
// table with the sums over the tables of its partition tree.
const stalenessSQL = `
WITH opt AS (
    SELECT c.oid, c.relname, c.relkind, c.reltuples,
           (SELECT split_part(o, '=', 2) FROM unnest(c.reloptions) o WHERE o LIKE 'autovacuum_enabled=%') AS enabled,
           (SELECT split_part(o, '=', 2) FROM unnest(c.reloptions) o WHERE o LIKE 'autovacuum_analyze_threshold=%') AS base,
           (SELECT split_part(o, '=', 2) FROM unnest(c.reloptions) o WHERE o LIKE 'autovacuum_analyze_scale_factor=%') AS scale
      FROM pg_class c
     WHERE c.relnamespace = 'pepsi'::regnamespace AND c.relkind IN ('r', 'p')
)
SELECT 'pepsi.' || o.relname, o.relkind = 'p',
       o.relkind = 'r' AND current_setting('autovacuum') = 'on' AND current_setting('track_counts') = 'on'
           AND coalesce(o.enabled, 'true') NOT IN ('false', 'off', 'no', '0'),
       coalesce(o.base::float8, current_setting('autovacuum_analyze_threshold')::float8)
           + coalesce(o.scale::float8, current_setting('autovacuum_analyze_scale_factor')::float8) * greatest(o.reltuples, 0),
       CASE WHEN o.relkind = 'r' THEN coalesce(s.n_mod_since_analyze, 0)
            ELSE (SELECT coalesce(sum(l.n_tup_ins + l.n_tup_upd + l.n_tup_del), 0)::bigint
                    FROM pg_partition_tree(o.oid) t JOIN pg_stat_user_tables l ON l.relid = t.relid WHERE t.isleaf) END,
       greatest(o.reltuples, 0),
       CASE WHEN o.relkind = 'r' THEN coalesce(s.n_live_tup, 0)
            ELSE (SELECT coalesce(sum(l.n_live_tup), 0)
                    FROM pg_partition_tree(o.oid) t JOIN pg_stat_user_tables l ON l.relid = t.relid WHERE t.isleaf) END,
       o.reltuples >= 0 OR s.last_analyze IS NOT NULL OR s.last_autoanalyze IS NOT NULL,
       coalesce(greatest(s.last_analyze, s.last_autoanalyze), '-infinity')
  FROM opt o LEFT JOIN pg_stat_user_tables s ON s.relid = o.oid
 ORDER BY o.relkind = 'p' DESC, o.relname`

// Stalenesses reads how stale the planner statistics of pepsi's tables are,
// partitioned tables first.
func (db *DB) Stalenesses(ctx context.Context) ([]Staleness, error) {
	rows, err := db.pool.Query(ctx, stalenessSQL)
	if err != nil {
		return nil, fmt.Errorf("read the tables' statistics: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Staleness, error) {
		var s Staleness
		var last pgtype.Timestamptz
		err := r.Scan(&s.Table, &s.Partitioned, &s.Autovacuum, &s.Threshold, &s.Changed, &s.Rows, &s.Live, &s.Analyzed, &last)
		if last.InfinityModifier == pgtype.Finite {
			s.LastAnalyzed = last.Time
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the tables' statistics: %w", err)
	}
	return out, nil
}

// Analyze runs ANALYZE on table, one of pepsi's (as Stalenesses names
// it), unless something else holds a lock that conflicts (another ANALYZE
// or a VACUUM), in which case it does nothing. A partitioned table's
// partitions are analyzed with it.
func (db *DB) Analyze(ctx context.Context, table string) error {
	if !strings.HasPrefix(table, "pepsi.") {
		return fmt.Errorf("analyze %s: not one of pepsi's tables", table)
	}
	ident := pgx.Identifier{"pepsi", strings.TrimPrefix(table, "pepsi.")}
	if _, err := db.pool.Exec(ctx, "ANALYZE (SKIP_LOCKED) "+ident.Sanitize()); err != nil {
		return fmt.Errorf("analyze %s: %w", table, err)
	}
	return nil
}
