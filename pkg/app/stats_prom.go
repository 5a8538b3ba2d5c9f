package app

import (
	"bufio"
	"io"
	"strconv"
	"strings"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The Prometheus text exposition format (version 0.0.4), written by hand:
// it is a few lines of text, and the test parses it back with
// github.com/prometheus/common/expfmt. For the node_exporter textfile
// collector, samples carry no timestamps (it refuses them) and each family
// is written once, all its samples together.

// stageHelp and dispatchHelp are the HELP texts of the counters, by column
// name; a counter without one gets a generic text (and fails a test).
var (
	stageHelp = map[string]string{
		"processed":    "Passes of the stage that answered success, fused passes included.",
		"failed":       "Passes of the stage that answered non-zero or broke the protocol.",
		"timeouts":     "Workers of the stage killed because a message went unanswered for MAX_RUNTIME.",
		"crashes":      "Workers of the stage that exited with messages outstanding.",
		"busy_seconds": "Seconds the stage's workers spent on messages.",
	}
	dispatchHelp = map[string]string{
		"claimed":      "Messages the dispatcher moved from pending to running.",
		"stage_passes": "Status lines received, fused stages counted once each.",
		"requeued":     "Advanced messages put back to pending for their next stage.",
		"done":         "Messages finished.",
		"failed":       "Messages that ended failed.",
		"paused":       "Passes that paused their message for a later retry.",
		"resumed":      "Paused messages that fell due and went back to pending.",
		"reset":        "Claimed messages put back to pending unrun (shutdown, crashes, timeouts).",
		"orphans":      "Running messages no worker held, reset to pending.",
		"expired":      "Done messages deleted by the retention sweep.",
	}
)

// promWriter writes metric families.
type promWriter struct {
	w *bufio.Writer
}

// family writes the HELP and TYPE lines of a family.
func (p *promWriter) family(name, typ, help string) {
	p.w.WriteString("# HELP " + name + " " + escapeHelp(help) + "\n")
	p.w.WriteString("# TYPE " + name + " " + typ + "\n")
}

// sample writes one sample; labels are name, value pairs.
func (p *promWriter) sample(name string, v float64, labels ...string) {
	p.w.WriteString(name)
	if len(labels) > 0 {
		p.w.WriteByte('{')
		for i := 0; i < len(labels); i += 2 {
			if i > 0 {
				p.w.WriteByte(',')
			}
			p.w.WriteString(labels[i] + `="` + escapeLabel(labels[i+1]) + `"`)
		}
		p.w.WriteByte('}')
	}
	p.w.WriteByte(' ')
	p.w.WriteString(strconv.FormatFloat(v, 'f', -1, 64))
	p.w.WriteByte('\n')
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

func helpOf(m map[string]string, table, name string) string {
	if h, ok := m[name]; ok {
		return h
	}
	return "Column " + name + " of " + table + "."
}

// writePrometheus writes the statistics and the queue's depth. Every
// stage known (configured, with statistics, or with messages) gets every
// series, zero when there is nothing to count, so that series do not come
// and go.
func writePrometheus(w io.Writer, s *statsSnapshot) error {
	p := &promWriter{w: bufio.NewWriter(w)}
	stages := s.stageNames()
	byStage := make(map[string]*queue.StageStats, len(s.Stages))
	for i := range s.Stages {
		byStage[s.Stages[i].Stage] = &s.Stages[i]
	}
	for _, f := range stageFields {
		name := "pepsi_stage_" + f.Name + "_total"
		p.family(name, "counter", helpOf(stageHelp, "pepsi.stage_stats", f.Name))
		for _, st := range stages {
			v := 0.0
			if row := byStage[st]; row != nil {
				v = f.value(row)
			}
			p.sample(name, v, "stage", st)
		}
	}
	for _, f := range dispatchFields {
		name := "pepsi_dispatch_" + f.Name + "_total"
		p.family(name, "counter", helpOf(dispatchHelp, "pepsi.dispatch_stats", f.Name))
		p.sample(name, f.value(&s.Dispatch))
	}
	p.family("pepsi_dispatch_stats_updated_timestamp_seconds", "gauge",
		"When the dispatcher last wrote its statistics, in seconds since the epoch.")
	p.sample("pepsi_dispatch_stats_updated_timestamp_seconds", float64(s.Dispatch.UpdatedAt.UnixMilli())/1000)

	type key struct {
		stage  string
		status queue.Status
	}
	counts := make(map[key]queueCount, len(s.Queue))
	for _, q := range s.Queue {
		counts[key{q.Stage, q.Status}] = q
	}
	p.family("pepsi_queue_messages", "gauge", "Messages in the queue by stage and status.")
	for _, st := range stages {
		for _, status := range queue.Statuses {
			p.sample("pepsi_queue_messages", float64(counts[key{st, status}].Messages), "stage", st, "status", string(status))
		}
	}
	p.family("pepsi_queue_oldest_pending_age_seconds", "gauge",
		"How long the oldest pending message of the stage has waited, in seconds; 0 when none is pending.")
	for _, st := range stages {
		p.sample("pepsi_queue_oldest_pending_age_seconds", counts[key{st, queue.Pending}].OldestAge, "stage", st)
	}
	p.family("pepsi_dispatcher_running", "gauge", "1 when a dispatcher holds the single-dispatcher lock, else 0.")
	running := 0.0
	if s.Dispatcher != nil {
		running = 1
	}
	p.sample("pepsi_dispatcher_running", running)
	return p.w.Flush()
}
