package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	execabs "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// schemaFile is sql/schema.sql, from this package's directory.
const schemaFile = "../../sql/schema.sql"

// schemaWrite, set in the environment (make schema), makes TestSchemaFile
// write sql/schema.sql instead of comparing it.
const schemaWrite = "PEPSI_SCHEMA_WRITE"

// schemaHeader opens sql/schema.sql; %d is the server's major version.
const schemaHeader = `-- The schema pepsi of a freshly migrated database (sql/NNN_*.sql, then
-- sql/functions/*.sql), as pg_dump --schema-only of PostgreSQL %d prints
-- it, less its SET lines and owners.
--
-- Generated: do not edit. Change the migrations or the functions, then run
-- make schema; TestSchemaFile (pkg/queue) fails while this file differs.
`

var schemaHeaderMajor = regexp.MustCompile(`pg_dump --schema-only of PostgreSQL (\d+) prints`)

// TestSchemaFile: sql/schema.sql is what a freshly migrated database has.
// The file is pg_dump's, so it is compared only on a server of the major
// version it was made on, with that version's pg_dump.
func TestSchemaFile(t *testing.T) {
	t.Parallel()
	write := os.Getenv(schemaWrite) != ""
	dsn := pgtest.Empty(t)
	ctx := testCtx(t)
	conn := connect(t, dsn)
	if _, err := queue.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var num int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::integer").Scan(&num); err != nil {
		t.Fatal(err)
	}
	major := num / 10000
	old, err := os.ReadFile(schemaFile)
	if err != nil && !(write && os.IsNotExist(err)) {
		t.Fatalf("%v: run make schema", err)
	}
	if m := schemaHeaderMajor.FindSubmatch(old); !write && m == nil {
		t.Fatalf("sql/schema.sql was not made by make schema (its header names no PostgreSQL version): run make schema")
	} else if !write && string(m[1]) != strconv.Itoa(major) {
		t.Fatalf("sql/schema.sql is pg_dump's of PostgreSQL %s, the test server is %d: test on PostgreSQL %s (PEPSI_TEST_DSN), or run make schema on %d and commit it", m[1], major, m[1], major)
	}
	pgDump, err := findPgDump(ctx, major)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dumpSchema(ctx, pgDump, dsn, major)
	if err != nil {
		t.Fatal(err)
	}
	if write {
		if err := os.WriteFile(schemaFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote sql/schema.sql (%s)", pgDump)
		return
	}
	if !bytes.Equal(got, old) {
		t.Errorf("sql/schema.sql differs from a freshly migrated database (%s); run make schema to write it again. First difference:\n%s",
			pgDump, firstDiff(string(old), string(got)))
	}
}

// dumpSchema returns the schema pepsi of dsn as sql/schema.sql holds it:
// pg_dump's, less what differs from one database or server to another (SET
// lines, owners, versions, \restrict keys) and its comment blocks, each
// "--", "-- Name: N; Type: T; Schema: S; Owner: O", "--" made one line
// "-- T N"; runs of blank lines made one.
func dumpSchema(ctx context.Context, pgDump, dsn string, major int) ([]byte, error) {
	cmd := execabs.CommandContext(ctx, pgDump, "--schema-only", "--schema=pepsi", "--no-owner", "--dbname="+dsn)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %s", pgDump, err, stderr.Bytes())
	}
	name := regexp.MustCompile(`^-- Name: (.*); Type: (.*); Schema: [^;]*; Owner: [^;]*$`)
	var b strings.Builder
	fmt.Fprintf(&b, schemaHeader, major)
	lines := strings.Split(string(out), "\n")
	blank := false // a blank line under the header
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t")
		switch {
		case strings.HasPrefix(l, "SET "), strings.HasPrefix(l, "SELECT pg_catalog.set_config("),
			strings.HasPrefix(l, `\restrict`), strings.HasPrefix(l, `\unrestrict`),
			strings.HasPrefix(l, "-- Dumped from "), strings.HasPrefix(l, "-- Dumped by "),
			l == "-- PostgreSQL database dump", l == "-- PostgreSQL database dump complete":
			continue
		case l == "--" && i+2 < len(lines) && name.MatchString(lines[i+1]) && lines[i+2] == "--":
			m := name.FindStringSubmatch(lines[i+1])
			if !blank {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "-- %s %s\n", m[2], m[1])
			blank = false
			i += 2
			// The blank line pg_dump puts under its comment goes.
			if i+1 < len(lines) && lines[i+1] == "" {
				i++
			}
			continue
		case l == "--":
			continue
		case l == "":
			if !blank {
				b.WriteString("\n")
			}
			blank = true
			continue
		}
		b.WriteString(l)
		b.WriteString("\n")
		blank = false
	}
	return []byte(strings.TrimRight(b.String(), "\n") + "\n"), nil
}

// findPgDump returns a pg_dump of the server's major version: beside the
// server's binaries as Debian (/usr/lib/postgresql/N/bin) and the PGDG
// packages for Red Hat (/usr/pgsql-N/bin) install them, else on PATH if it
// is of that version. Another version's prints another text (and an older
// one refuses a newer server).
func findPgDump(ctx context.Context, major int) (string, error) {
	candidates := []string{
		filepath.Join("/usr/lib/postgresql", strconv.Itoa(major), "bin", "pg_dump"),
		filepath.Join("/usr/pgsql-"+strconv.Itoa(major), "bin", "pg_dump"),
	}
	if p, err := execabs.LookPath("pg_dump"); err == nil {
		candidates = append(candidates, p)
	}
	var seen []string
	for _, p := range candidates {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			continue
		}
		out, err := execabs.CommandContext(ctx, p, "--version").Output()
		if err != nil {
			continue
		}
		// "pg_dump (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
		v := regexp.MustCompile(`\) (\d+)`).FindSubmatch(out)
		if v != nil && string(v[1]) == strconv.Itoa(major) {
			return p, nil
		}
		seen = append(seen, fmt.Sprintf("%s (%s)", p, strings.TrimSpace(string(out))))
	}
	return "", fmt.Errorf("no pg_dump of PostgreSQL %d, the test server's version (Debian: apt-get install postgresql-client-%d); found: %v",
		major, major, seen)
}

// firstDiff shows the first line where a and b differ, with a little
// before it.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y || i >= len(al) || i >= len(bl) {
			from := max(i-3, 0)
			var s strings.Builder
			for j := from; j < i && j < len(al); j++ {
				fmt.Fprintf(&s, "  %d: %s\n", j+1, al[j])
			}
			fmt.Fprintf(&s, "- %d: %s\n+ %d: %s", i+1, x, i+1, y)
			return s.String()
		}
	}
	return ""
}
