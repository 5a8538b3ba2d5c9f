package queue_test

import (
	"context"
	"errors"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
	schema "github.com/pepsi-dev/pepsi/sql"
)

// codeFS is the embedded functions with extra files (name: contents) added
// or, with contents "", taken out.
func codeFS(t *testing.T, extra map[string]string) fstest.MapFS {
	t.Helper()
	all := fstest.MapFS{}
	err := fs.WalkDir(schema.Functions, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(schema.Functions, p)
		all[p] = &fstest.MapFile{Data: body}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range extra {
		if body == "" {
			delete(all, "functions/"+name)
			continue
		}
		all["functions/"+name] = &fstest.MapFile{Data: []byte(body)}
	}
	return all
}

func TestLoadCode(t *testing.T) {
	t.Parallel()
	code, err := queue.LoadCode()
	if err != nil {
		t.Fatal(err)
	}
	if len(code.Files) == 0 || len(code.Hash) != 64 {
		t.Fatalf("embedded code: %d files, hash %q", len(code.Files), code.Hash)
	}
	for i := 1; i < len(code.Files); i++ {
		if code.Files[i-1].Name >= code.Files[i].Name {
			t.Errorf("files out of order: %s before %s", code.Files[i-1].Name, code.Files[i].Name)
		}
	}
	same, err := queue.LoadCodeFS(codeFS(t, nil))
	if err != nil || same.Hash != code.Hash {
		t.Errorf("the same files: hash %q, %v; want %q", same.Hash, err, code.Hash)
	}
	// A file more, a file changed, a file renamed: another hash.
	first := code.Files[0]
	for name, extra := range map[string]map[string]string{
		"more":    {"99_more.sql": "SELECT 1;"},
		"changed": {first.Name: first.SQL + "\n"},
		"renamed": {first.Name: "", "00_" + first.Name: first.SQL},
	} {
		c, err := queue.LoadCodeFS(codeFS(t, extra))
		if err != nil || c.Hash == code.Hash || c.Hash == "" {
			t.Errorf("%s: hash %q, %v; want another", name, c.Hash, err)
		}
	}
	// Other files are left out; a .sql file not named NN_name.sql is refused.
	if c, err := queue.LoadCodeFS(codeFS(t, map[string]string{"README": "x"})); err != nil || c.Hash != code.Hash {
		t.Errorf("with a README: hash %q, %v; want the same", c.Hash, err)
	}
	for _, bad := range []string{"enqueue.sql", "20-enqueue.sql", "20_Enqueue.sql"} {
		if _, err := queue.LoadCodeFS(codeFS(t, map[string]string{bad: "SELECT 1;"})); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: %v, want an error naming it", bad, err)
		}
	}
	// No directory: nothing to install.
	if c, err := queue.LoadCodeFS(fstest.MapFS{"001_a.sql": {Data: []byte("SELECT 1")}}); err != nil || len(c.Files) != 0 || c.Hash != "" {
		t.Errorf("without functions: %+v, %v", c, err)
	}
}

// TestMigrationsMakeNoFunctions: the functions and triggers are made only
// by sql/functions; a migration that needs one for its own data change
// writes out what it needs (see 012's ranges ahead, 013's keys).
func TestMigrationsMakeNoFunctions(t *testing.T) {
	t.Parallel()
	comment := regexp.MustCompile(`--[^\n]*`)
	create := regexp.MustCompile(`(?is)\bCREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|TRIGGER)\b`)
	for _, m := range migrations(t) {
		if loc := create.FindStringIndex(comment.ReplaceAllString(m.SQL, "")); loc != nil {
			t.Errorf("%03d_%s makes a function or trigger: put it in sql/functions", m.Version, m.Name)
		}
	}
}

// TestCodeDefinesEach: every function and trigger of a migrated database
// is made by exactly one file of sql/functions.
func TestCodeDefinesEach(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	code, err := queue.LoadCode()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `
		SELECT 'FUNCTION pepsi.' || p.proname || '(' FROM pg_proc p WHERE p.pronamespace = 'pepsi'::regnamespace
		UNION ALL
		SELECT 'CREATE TRIGGER ' || g.tgname || ' ' FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
		 WHERE c.relnamespace = 'pepsi'::regnamespace AND NOT g.tgisinternal`)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(objects) < 20 {
		t.Fatalf("only %d functions and triggers: %v", len(objects), objects)
	}
	for _, o := range objects {
		var in []string
		for _, f := range code.Files {
			if strings.Contains(f.SQL, o) {
				in = append(in, f.Name)
			}
		}
		if len(in) != 1 {
			t.Errorf("%q made by %v, want one file of sql/functions", o, in)
		}
	}
}

// TestCodeInstall: Migrate installs the functions once and records their
// hash; with the same hash it installs nothing and waits for no table
// (dispatchers holding any lock on every queue table); with another it
// installs them again without waiting for the queue tables either, as the
// triggers are unchanged, and makes again a trigger that changed, waiting
// for its table as a migration does.
func TestCodeInstall(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	code, err := queue.LoadCode()
	if err != nil {
		t.Fatal(err)
	}
	hash, at, err := queue.CodeStatus(ctx, connect(t, dsn))
	if err != nil || hash != code.Hash || at == nil {
		t.Fatalf("after Migrate: code %q at %v, %v; want %q", hash, at, err, code.Hash)
	}
	installs := 0
	quick := queue.MigrateOptions{LockTimeout: 50 * time.Millisecond, Tries: 1, Installed: func(queue.Code) { installs++ }}

	hold := func(mode string) pgx.Tx {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "LOCK pepsi.state, pepsi.state_live, pepsi.message, pepsi.ingress, pepsi.wake IN "+mode+" MODE"); err != nil {
			t.Fatal(err)
		}
		return tx
	}

	// Unchanged: nothing, whatever is held.
	tx := hold("ACCESS EXCLUSIVE")
	if applied, err := queue.MigrateWith(ctx, connect(t, dsn), quick); err != nil || len(applied) != 0 || installs != 0 {
		t.Fatalf("Migrate again beside ACCESS EXCLUSIVE: applied %v, %d installs, %v; want nothing", applied, installs, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Another hash: installed again beside what a dispatcher holds.
	exec(t, db, "UPDATE pepsi.schema_code SET hash = 'other'")
	tx = hold("ROW EXCLUSIVE")
	if _, err := queue.MigrateWith(ctx, connect(t, dsn), quick); err != nil || installs != 1 {
		t.Fatalf("Migrate with another hash beside ROW EXCLUSIVE: %d installs, %v; want 1", installs, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if hash, _, err := queue.CodeStatus(ctx, connect(t, dsn)); err != nil || hash != code.Hash {
		t.Fatalf("code %q, %v; want %q", hash, err, code.Hash)
	}

	// A trigger that differs (as version 9 made it, with a WHEN) and one
	// gone are made again, waiting for their tables as a migration does.
	exec(t, db, `DROP TRIGGER state_live_ingress ON pepsi.state_live;
		DROP TRIGGER state_ingress ON pepsi.state;
		CREATE TRIGGER state_ingress AFTER INSERT ON pepsi.state
		    FOR EACH STATEMENT WHEN (pepsi.armed()) EXECUTE FUNCTION pepsi.notify_ingress();
		UPDATE pepsi.schema_code SET hash = 'other'`)
	tx = hold("ROW EXCLUSIVE")
	waits := 0
	o := quick
	o.Tries = 1000
	o.Waiting = func(m queue.Migration, try int, err error) {
		if m.Version != 0 || m.Name != "functions" {
			t.Errorf("waiting for %+v, want the functions", m)
		}
		if waits++; waits == 1 {
			if err := tx.Rollback(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := queue.MigrateWith(ctx, connect(t, dsn), o); err != nil || installs != 2 || waits < 1 {
		t.Fatalf("Migrate with changed triggers: %d installs after %d waits, %v; want 2 after 1 or more", installs, waits, err)
	}
	var defs string
	if err := db.Pool.QueryRow(ctx, `SELECT string_agg(pg_get_triggerdef(oid), E'\n' ORDER BY tgname) FROM pg_trigger
		WHERE tgrelid IN ('pepsi.state'::regclass, 'pepsi.state_live'::regclass)`).Scan(&defs); err != nil {
		t.Fatal(err)
	}
	if want := "CREATE TRIGGER state_ingress AFTER INSERT ON pepsi.state FOR EACH STATEMENT EXECUTE FUNCTION pepsi.notify_ingress()\n" +
		"CREATE TRIGGER state_live_ingress AFTER INSERT ON pepsi.state_live FOR EACH STATEMENT EXECUTE FUNCTION pepsi.notify_ingress()"; defs != want {
		t.Errorf("triggers after the install:\n%s\nwant\n%s", defs, want)
	}

	// Held throughout: the install fails as a migration does.
	exec(t, db, "DROP TRIGGER state_ingress ON pepsi.state; UPDATE pepsi.schema_code SET hash = 'other'")
	tx = hold("ROW EXCLUSIVE")
	defer tx.Rollback(context.Background()) //nolint:errcheck
	o = quick
	o.Tries = 2
	_, err = queue.MigrateWith(ctx, connect(t, dsn), o)
	if !errors.Is(err, queue.ErrMigrateLocked) || !strings.HasPrefix(err.Error(), "functions: ") {
		t.Fatalf("install with pepsi.state held: %v, want ErrMigrateLocked for the functions", err)
	}
}

// TestCodeInstallFails: a file of sql/functions that fails is named, and
// nothing of the install stays: not the files before it, not its hash.
// CheckSchema refuses a database whose functions were never installed.
func TestCodeInstallFails(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	code, err := queue.LoadCode()
	if err != nil {
		t.Fatal(err)
	}
	exec(t, db, "DELETE FROM pepsi.schema_code")
	if err := db.CheckSchema(ctx); err == nil || !strings.Contains(err.Error(), "functions were never installed: run 'pepsi migrate'") {
		t.Fatalf("CheckSchema without functions installed: %v", err)
	}
	bad := codeFS(t, map[string]string{
		"05_first.sql": "CREATE FUNCTION pepsi.first_test() RETURNS integer LANGUAGE sql AS 'SELECT 1';",
		"99_bad.sql":   "CREATE FUNCTION pepsi.bad_test( RETURNS;",
	})
	_, err = queue.MigrateCodeForTest(ctx, connect(t, dsn), bad, queue.MigrateOptions{})
	if err == nil || !strings.Contains(err.Error(), "functions: functions/99_bad.sql: ") {
		t.Fatalf("install of a bad file: %v, want an error naming it", err)
	}
	if n := count(t, db, "SELECT count(*) FROM pg_proc WHERE proname = 'first_test'"); n != 0 {
		t.Errorf("the file before the bad one stayed installed")
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.schema_code"); n != 0 {
		t.Errorf("a failed install recorded a hash")
	}
	if _, err := queue.Migrate(ctx, connect(t, dsn)); err != nil {
		t.Fatal(err)
	}
	if hash, _, err := queue.CodeStatus(ctx, connect(t, dsn)); err != nil || hash != code.Hash {
		t.Fatalf("code %q, %v; want %q", hash, err, code.Hash)
	}
	if err := db.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
}
