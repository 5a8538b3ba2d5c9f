-- pepsi schema, version 16: the functions and triggers in one place.
--
-- Until version 15 a migration that changed a function made it again, so
-- that pepsi.enqueue() was written six times over the migrations. Now the
-- functions and triggers are in sql/functions/*.sql, one file per concern,
-- and pepsi migrate installs them whole after the numbered migrations (in
-- one transaction, under the migration lock, waiting for a table at most
-- its lock_timeout each try, as a migration does). pepsi.schema_code
-- holds the hash of what it installed: when the files are the same it
-- installs nothing, so a pepsi migrate with nothing to do takes no lock on
-- any table the dispatchers use. The migrations keep the tables and the
-- data changes.
--
-- Cost: a new table of one row.
CREATE TABLE pepsi.schema_code (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    hash         text NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);
