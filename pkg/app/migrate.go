package app

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func migrateCommand() *cli.Command {
	up := &cli.Command{
		Name:   "up",
		Usage:  "apply the migrations the database lacks (the default)",
		Action: migrateUp,
	}
	return &cli.Command{
		Name:      "migrate",
		Usage:     "create or upgrade the database schema",
		UsageText: "pepsi migrate [up]\npepsi migrate status",
		Description: "Applies the schema migrations built into pepsi, in order, each in its own\n" +
			"transaction, under an advisory lock. Running it again does nothing. It\n" +
			"runs beside running dispatchers: a migration waits at most a second for a\n" +
			"table they use, then lets them go on and tries again, up to 30 times. It\n" +
			"refuses a database whose schema is newer than this pepsi.",
		Subcommands: []*cli.Command{
			up,
			{
				Name:   "status",
				Usage:  "list the migrations and when each was applied",
				Action: migrateStatus,
			},
		},
		Action: migrateUp, // "pepsi migrate" is "pepsi migrate up"
	}
}

// migrateUp applies the pending migrations and prints one line for each.
func migrateUp(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unknown migrate command %q (want up or status)", c.Args().First())
	}
	conn, err := connect(c)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(c.Context))
	var installed *queue.Code
	applied, err := queue.MigrateWith(c.Context, conn, queue.MigrateOptions{
		Waiting: func(m queue.Migration, try int, err error) {
			fmt.Fprintf(c.App.ErrWriter, "pepsi migrate: %03d_%s: its tables are in use (try %d of %d: %v); trying again\n",
				m.Version, m.Name, try, queue.DefaultMigrateTries, err)
		},
		Installed: func(code queue.Code) { installed = &code },
	})
	for _, m := range applied {
		fmt.Fprintf(c.App.Writer, "applied %03d_%s\n", m.Version, m.Name)
	}
	if installed != nil {
		fmt.Fprintf(c.App.Writer, "installed the functions and triggers of sql/functions (%d files, %.12s)\n", len(installed.Files), installed.Hash)
	}
	if err != nil {
		return err
	}
	if len(applied) == 0 && installed == nil {
		ms, err := queue.Migrations()
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "schema is up to date (version %d)\n", len(ms))
	}
	return nil
}

// migrateStatus prints every known migration and when it was applied. A
// database newer than this binary is reported after the table (exit 1).
func migrateStatus(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	conn, err := connect(c)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(c.Context))
	status, current, err := queue.MigrateStatus(c.Context, conn)
	if err != nil {
		return err
	}
	rows := make([][]string, len(status))
	for i, s := range status {
		applied := "pending"
		if s.AppliedAt != nil {
			applied = s.AppliedAt.Local().Format(time.DateTime + " -0700")
		}
		rows[i] = []string{strconv.Itoa(s.Version), s.Name, applied}
	}
	hash, at, err := queue.CodeStatus(c.Context, conn)
	if err != nil {
		return err
	}
	code, err := queue.LoadCode()
	if err != nil {
		return err
	}
	functions := "pending"
	switch {
	case at != nil && hash == code.Hash:
		functions = at.Local().Format(time.DateTime + " -0700")
	case at != nil:
		functions = "others (" + hash[:min(12, len(hash))] + "): pending"
	}
	rows = append(rows, []string{"-", "functions (" + code.Hash[:12] + ")", functions})
	if err := printTable(c.App.Writer, []string{"VERSION", "NAME", "APPLIED"}, rows); err != nil {
		return err
	}
	if current > len(status) {
		return fmt.Errorf("database schema is at version %d, newer than this pepsi knows (%d): upgrade pepsi", current, len(status))
	}
	return nil
}

// connect loads the configuration and opens one connection to its DSN.
func connect(c *cli.Context) (*pgx.Conn, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	pc, err := parseDSN(cfg)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(c.Context, pc)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", queue.DescribeConnect(err))
	}
	return conn, nil
}

// parseDSN checks the configured DSN; one that does not parse is a
// configuration error (exit 2) naming where it came from. pgx fills in what
// the DSN leaves out from PG* environment variables, and a bad one
// (PGCONNECT_TIMEOUT=abc) fails the same way; it was blamed on the DSN. So
// when the error is about a setting that such a variable gives, and the
// variable's value alone fails the same way, the variable is named instead.
func parseDSN(cfg *config.Config) (*pgx.ConnConfig, error) {
	pc, err := pgx.ParseConfig(cfg.DSN)
	if err == nil {
		return pc, nil
	}
	// why is an error of ParseConfig without its "cannot parse `DSN`: ".
	why := func(err error) string {
		s := err.Error()
		if i := strings.LastIndex(s, "`: "); i >= 0 {
			return s[i+len("`: "):]
		}
		return s
	}
	// The variables of pgconn's parseEnvSettings whose values ParseConfig
	// checks, each with the setting it gives (pgx v5.12).
	for _, v := range [][2]string{
		{"PGPORT", "port"}, {"PGCONNECT_TIMEOUT", "connect_timeout"}, {"PGSSLMODE", "sslmode"},
		{"PGSSLCERTMODE", "sslcertmode"}, {"PGTARGETSESSIONATTRS", "target_session_attrs"},
		{"PGMINPROTOCOLVERSION", "min_protocol_version"}, {"PGMAXPROTOCOLVERSION", "max_protocol_version"},
		{"PGCHANNELBINDING", "channel_binding"}, {"PGREQUIREAUTH", "require_auth"}, {"PGSERVICE", "service"},
	} {
		name, setting := v[0], v[1]
		value := os.Getenv(name)
		if value == "" || !strings.Contains(why(err), setting) {
			continue
		}
		// The value given in a DSN of its own, where it wins over the
		// variable, and over TCP, where TLS settings are checked too.
		probe := "host=localhost " + setting + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(value) + "'"
		if _, perr := pgx.ParseConfig(probe); perr != nil && why(perr) == why(err) {
			return nil, invalid("%s=%q in the environment: %s", name, value, why(err))
		}
	}
	from := "[database] DSN in " + cfg.Path
	if os.Getenv("PEPSI_DSN") != "" {
		from = "PEPSI_DSN"
	}
	return nil, invalid("%s: %v", from, err)
}
