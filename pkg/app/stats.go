package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/metrics"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "print stage and dispatcher statistics",
		UsageText: "pepsi stats [--format table|json|prometheus] [--output FILE]",
		Description: "Prints the statistics the dispatcher keeps (pepsi.stage_stats and\n" +
			"pepsi.dispatch_stats) as tables, as one JSON object, or in the Prometheus\n" +
			"text exposition format with the queue's depth added, for the node_exporter\n" +
			"textfile collector. With --output, the file is replaced atomically; only a\n" +
			"regular file or a new one is written (\"-\" is standard output).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "table", Usage: "`FORMAT`: table, json or prometheus"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, TakesFile: true, Usage: "write to `FILE` (a temporary file renamed over it; a regular file or a new one) instead of standard output (\"-\")"},
		},
		Action: stats,
	}
}

// statsFormats maps --format to its writer; prometheus is written by
// pkg/metrics, the collector pepsi httpd serves.
var statsFormats = map[string]func(io.Writer, *statsSnapshot) error{
	"table":      writeStatsTable,
	"json":       writeStatsJSON,
	"prometheus": nil,
}

// statsSnapshot is everything pepsi stats reports, read at one time.
type statsSnapshot struct {
	Time       time.Time           `json:"time"`
	Dispatcher *queue.LockHolder   `json:"-"`
	Stages     []queue.StageStats  `json:"stages"`
	Dispatch   queue.DispatchStats `json:"dispatch"`
	Queue      []queueCount        `json:"queue"`
}

// queueCount is one stage × status count of the queue.
type queueCount struct {
	Stage    string       `json:"stage"`
	Status   queue.Status `json:"status"`
	Messages int64        `json:"messages"`
	// OldestAge is how long the oldest of them has been unchanged, in seconds.
	OldestAge float64 `json:"oldest_age_seconds"`
}

func stats(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	format := c.String("format")
	write, ok := statsFormats[format]
	if !ok {
		return usage("--format %q: want table, json or prometheus", format)
	}
	output := c.String("output")
	if output == "" && c.IsSet("output") {
		return usage("--output is empty")
	}
	if output == "-" {
		output = "" // standard output, as elsewhere; a file named so: ./-
	}
	// Refused before the database is asked anything; writeFileAtomic checks
	// again, as the path may change while the statistics are read.
	if output != "" {
		if err := checkOutput(output); err != nil {
			return err
		}
	}
	db, cfg, err := openQueue(c)
	if err != nil {
		return err
	}
	defer db.Close()
	if write == nil {
		return writeStats(c, output, func(w io.Writer) error {
			return metrics.WriteStatsText(w, metrics.StatsOptions{
				Source: metrics.SourceOf(db), Stages: cfg.StageNames(), Log: slog.New(slog.DiscardHandler)})
		})
	}
	snap := &statsSnapshot{}
	if snap.Stages, snap.Dispatch, err = db.ReadStats(c.Context); err != nil {
		return err
	}
	counts, err := db.Counts(c.Context)
	if err != nil {
		return err
	}
	if snap.Time, err = db.Now(c.Context); err != nil {
		return err
	}
	if snap.Dispatcher, err = db.LockHolder(c.Context); err != nil {
		return err
	}
	snap.Queue = make([]queueCount, len(counts))
	for i, q := range counts {
		snap.Queue[i] = queueCount{Stage: q.Stage, Status: q.Status, Messages: q.N, OldestAge: max(snap.Time.Sub(q.Oldest), 0).Seconds()}
	}
	return writeStats(c, output, func(w io.Writer) error { return write(w, snap) })
}

// writeStats writes to standard output (output ""), or to output
// atomically.
func writeStats(c *cli.Context, output string, write func(io.Writer) error) error {
	if output == "" {
		return write(c.App.Writer)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	return writeFileAtomic(output, buf.Bytes())
}

// checkOutput refuses an --output path that is there and is not a regular
// file. The rename that replaces the file would turn a device, a FIFO or a
// socket into a regular file (as root, /dev/full was replaced so), and
// fail on a directory. A symbolic link is refused too, whatever it points
// to: renaming over it would cut the link, and following it would let
// whoever can make a link in the directory choose the file that pepsi
// stats (often root's cron job) replaces.
func checkOutput(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--output %s: %w", path, unwrapPath(err))
	case fi.Mode().IsRegular():
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return fmt.Errorf("--output %s: %w", path, unwrapPath(err))
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			target += ", which does not exist"
		}
		return invalid("--output %s: a symbolic link (to %s), not a regular file: left as it is; name the file itself", path, target)
	}
	return invalid("--output %s: %s, not a regular file: left as it is", path, fileKind(fi.Mode()))
}

// fileKind names the type of a file that is not a regular file.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

// writeFileAtomic replaces path, a regular file or none (see checkOutput),
// with data: it writes a temporary file in the same directory (a dot file
// that does not end in .prom, which the textfile collector ignores), syncs
// it, makes it world-readable and renames it over path, so that a reader
// sees the old file or the new one, never half of one.
func writeFileAtomic(path string, data []byte) error {
	if err := checkOutput(path); err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("--output %s: %w", path, unwrapPath(err))
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("--output %s: %w", path, unwrapPath(err))
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	// Once more just before the rename, which is what would replace it.
	if err := checkOutput(path); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("--output %s: %w", path, unwrapPath(err))
	}
	return nil
}

// unwrapPath drops the temporary file's name from an *os.PathError or
// *os.LinkError: the message names the output file instead.
func unwrapPath(err error) error {
	switch e := err.(type) {
	case *os.PathError:
		return e.Err
	case *os.LinkError:
		return e.Err
	}
	return err
}

// statsField is one counter column of a statistics table.
type statsField struct {
	Name  string // the column, as its JSON name
	Index int    // the struct field
	Float bool
}

// counterFields lists the counters of a stats struct (StageStats or
// DispatchStats) by their JSON names, in column order: every int64 and
// float64 field. Reading them from the struct, not from a list here, keeps
// every output in step with the tables when a counter is added.
func counterFields(t reflect.Type) []statsField {
	var out []statsField
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		switch f.Type.Kind() {
		case reflect.Int64:
			out = append(out, statsField{name, i, false})
		case reflect.Float64:
			out = append(out, statsField{name, i, true})
		}
	}
	return out
}

var (
	stageFields    = counterFields(reflect.TypeFor[queue.StageStats]())
	dispatchFields = counterFields(reflect.TypeFor[queue.DispatchStats]())
)

// The table's names for counters whose column name misleads: a stage's
// failed counts failed passes, and a pass that fails its message
// (pepsi.fail) is an ok pass; the dispatcher's counts messages that ended
// failed, at any stage. JSON and Prometheus keep the columns' names.
var (
	stageLabels    = map[string]string{"failed": "failed_passes"}
	dispatchLabels = map[string]string{"failed": "failed_messages"}
)

// label returns f's name in the table, as labels renames it.
func (f statsField) label(labels map[string]string) string {
	if l, ok := labels[f.Name]; ok {
		return l
	}
	return f.Name
}

// value returns field f of the struct v points to.
func (f statsField) value(v any) float64 {
	x := reflect.ValueOf(v).Elem().Field(f.Index)
	if f.Float {
		return x.Float()
	}
	return float64(x.Int())
}

// text formats field f of the struct v points to.
func (f statsField) text(v any) string {
	x := reflect.ValueOf(v).Elem().Field(f.Index)
	if f.Float {
		return strconv.FormatFloat(x.Float(), 'f', 3, 64)
	}
	return strconv.FormatInt(x.Int(), 10)
}

// writeStatsTable prints the stage table, a blank line, and the
// dispatcher's counters as NAME VALUE lines.
func writeStatsTable(w io.Writer, s *statsSnapshot) error {
	header := []string{"STAGE"}
	for _, f := range stageFields {
		header = append(header, f.label(stageLabels))
	}
	header = append(header, "updated_at")
	rows := make([][]string, len(s.Stages))
	for i := range s.Stages {
		st := &s.Stages[i]
		r := []string{st.Stage}
		for _, f := range stageFields {
			r = append(r, f.text(st))
		}
		rows[i] = append(r, fmtTime(st.UpdatedAt))
	}
	if err := printTable(w, header, rows); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	rows = rows[:0]
	for _, f := range dispatchFields {
		rows = append(rows, []string{f.label(dispatchLabels), f.text(&s.Dispatch)})
	}
	rows = append(rows, []string{"updated_at", fmtTime(s.Dispatch.UpdatedAt)})
	return printTable(w, []string{"DISPATCH", "VALUE"}, rows)
}

// writeStatsJSON prints the snapshot as one JSON object on one line.
func writeStatsJSON(w io.Writer, s *statsSnapshot) error {
	type dispatcher struct {
		Running bool   `json:"running"`
		PID     int32  `json:"server_pid,omitempty"`
		Name    string `json:"application_name,omitempty"`
	}
	out := struct {
		*statsSnapshot
		Dispatcher dispatcher `json:"dispatcher"`
	}{statsSnapshot: s}
	if d := s.Dispatcher; d != nil {
		out.Dispatcher = dispatcher{true, d.PID, d.Name}
	}
	if out.Stages == nil {
		out.Stages = []queue.StageStats{}
	}
	if out.Queue == nil {
		out.Queue = []queueCount{}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}
