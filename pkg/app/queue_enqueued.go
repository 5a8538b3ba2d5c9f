package app

import (
	"fmt"
	"maps"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Messages in pepsi.ingress are enqueued and not yet admitted: they are in
// no status until a dispatcher (or a command that may write) admits them.
// A session that may not admit them, a read-only role or a standby, still
// sees them, counted per stage, while no dispatcher runs.

// printEnqueued prints, under the summary's table, a line for each stage
// with messages in pepsi.ingress.
func printEnqueued(c *cli.Context, db *admin.DB) error {
	enq, err := db.Enqueued(c.Context)
	if err != nil {
		return err
	}
	for _, s := range slices.Sorted(maps.Keys(enq)) {
		if _, err := fmt.Fprintf(c.App.Writer, "stage %s: %s\n", s, enqueuedText(enq[s])); err != nil {
			return err
		}
	}
	return nil
}

// noteEnqueued says on stderr, after ls, how many messages of the stage
// asked (all: every stage) wait in pepsi.ingress, unlisted, when pending
// ones were asked for: once admitted they would be listed as pending.
func noteEnqueued(c *cli.Context, db *admin.DB, p admin.ListParams) error {
	if (p.Status != "" && p.Status != queue.Pending) || p.Parent > 0 { // an enqueued message is nobody's child
		return nil
	}
	enq, err := db.Enqueued(c.Context)
	if err != nil {
		return err
	}
	for _, s := range slices.Sorted(maps.Keys(enq)) {
		if p.Stage != "" && s != p.Stage {
			continue
		}
		if _, err := fmt.Fprintf(c.App.ErrWriter, "%s: not listed: stage %s: %s\n", c.Command.HelpName, s, enqueuedText(enq[s])); err != nil {
			return err
		}
	}
	return nil
}

// enqueuedText says that n messages are enqueued and not yet admitted;
// the summary counts them as pending.
func enqueuedText(n int64) string {
	it := "them"
	if n == 1 {
		it = "it"
	}
	return fmt.Sprintf("%s enqueued, not yet admitted (in pepsi.ingress until a dispatcher admits %s)", plural(n, "pending message"), it)
}
