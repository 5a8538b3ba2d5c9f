// Package sql holds pepsi's schema, embedded in the binary.
//
// The numbered migrations, NNN_name.sql, make the tables and change the
// data; versions start at 1 and have no gaps, and each is applied once, in
// its own transaction.
//
// The functions and triggers are in functions/NN_name.sql, one file per
// concern, and are installed whole after the migrations, in name order
// (the number puts what others need first), in one transaction, whenever
// they differ from what the database has (pepsi.schema_code holds their
// hash). So each statement there must make its object whatever was there
// before: CREATE OR REPLACE FUNCTION, and triggers made again only when
// they differ. A function whose arguments or result change must have the
// old one dropped first (CREATE OR REPLACE cannot change them, and would
// make a second function beside it): by a DROP FUNCTION IF EXISTS of the
// old signature in its file, just before the CREATE, so that the drop and
// the new function commit together and producers never find it missing
// (a numbered migration would drop it a transaction, and maybe many lock
// waits, before the install makes it again; 20_enqueue.sql, schema 17).
// One that is no longer wanted is dropped by a numbered migration. A data
// change in a migration must not call these functions (they are not
// installed yet on a new database): it writes out what it needs.
//
// schema.sql is the whole schema of a freshly migrated database, as
// pg_dump prints it: made by `make schema`, checked by TestSchemaFile.
package sql

import "embed"

// Files holds the migrations.
//
//go:embed [0-9]*.sql
var Files embed.FS

// Functions holds the functions and triggers, in its directory functions.
//
//go:embed functions/*.sql
var Functions embed.FS
