package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Figure is one measured figure, beside its ceiling (or floor) and target.
type Figure struct {
	Key     string  // a short stable name, e.g. "commit.passes"
	Name    string  // what was measured
	Value   float64 // in Unit
	Unit    string
	Ceiling float64 // the database's own ceiling (or floor) for the work, in Unit; 0: none
	Of      string  // what the ceiling is
	Ratio   float64 // Value / Ceiling (for a floor: how many times the floor)
	Target  string  // the target, e.g. "≥ 0.90"
	Met     string  // "ok", "MISS" or ""
	Load    float64 // one-minute load average when it was measured
}

// Report is a run's figures.
type Report struct {
	Header  []string
	Figures []Figure
	Notes   []string
	Took    time.Duration
}

// Figure returns the figure with key, or nil.
func (r *Report) Figure(key string) *Figure {
	for i := range r.Figures {
		if r.Figures[i].Key == key {
			return &r.Figures[i]
		}
	}
	return nil
}

func (r *Report) add(f Figure) {
	if f.Ceiling > 0 {
		f.Ratio = f.Value / f.Ceiling
	}
	if f.Load == 0 {
		f.Load = loadAvg()
	}
	r.Figures = append(r.Figures, f)
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// atLeast and atMost judge a value against a target.
func atLeast(v, min float64) string {
	if v >= min {
		return "ok"
	}
	return "MISS"
}

func atMost(v, max float64) string {
	if v <= max {
		return "ok"
	}
	return "MISS"
}

// Print writes the report as a table and notes.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintln(w, "pepsi bench")
	for _, h := range r.Header {
		fmt.Fprintln(w, "  "+h)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tMEASURED\tCEILING (DATABASE'S OWN, SAME RUN)\tRATIO\tTARGET\tLOAD")
	for _, f := range r.Figures {
		ceiling, ratio := "-", "-"
		if f.Ceiling > 0 {
			ceiling = num(f.Ceiling) + " " + f.Unit + ": " + f.Of
			ratio = fmt.Sprintf("%.2f", f.Ratio)
		} else if f.Of != "" {
			ceiling = f.Of
		}
		target := f.Target
		if f.Met != "" {
			target += " " + f.Met
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%s\t%s\t%s\t%.1f\n", f.Name, num(f.Value), f.Unit, ceiling, ratio, strings.TrimSpace(target), f.Load)
	}
	tw.Flush()
	if len(r.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.Notes {
			fmt.Fprintln(w, "  * "+n)
		}
	}
	fmt.Fprintf(w, "\npepsi bench took %s\n", r.Took.Round(time.Second))
}

// PrintJSON writes the report as one JSON object, for programs (pepsi-bench
// --format json): header lines, figures (key, name, value, unit, ceiling,
// of, ratio, target, met, load; a ceiling or ratio of 0 is left out, and
// a value that is not a finite number is null), notes and the run's
// duration in seconds.
func (r *Report) PrintJSON(w io.Writer) error {
	type figure struct {
		Key     string   `json:"key"`
		Name    string   `json:"name"`
		Value   *float64 `json:"value"`
		Unit    string   `json:"unit"`
		Ceiling *float64 `json:"ceiling,omitempty"`
		Of      string   `json:"of,omitempty"`
		Ratio   *float64 `json:"ratio,omitempty"`
		Target  string   `json:"target,omitempty"`
		Met     string   `json:"met,omitempty"`
		Load    *float64 `json:"load"`
	}
	finite := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	nonzero := func(v float64) *float64 {
		if v == 0 {
			return nil
		}
		return finite(v)
	}
	out := struct {
		Header  []string `json:"header"`
		Figures []figure `json:"figures"`
		Notes   []string `json:"notes"`
		Took    float64  `json:"took_seconds"`
	}{Header: r.Header, Figures: []figure{}, Notes: r.Notes, Took: r.Took.Seconds()}
	if out.Header == nil {
		out.Header = []string{}
	}
	if out.Notes == nil {
		out.Notes = []string{}
	}
	for _, f := range r.Figures {
		out.Figures = append(out.Figures, figure{Key: f.Key, Name: f.Name, Value: finite(f.Value), Unit: f.Unit,
			Ceiling: nonzero(f.Ceiling), Of: f.Of, Ratio: nonzero(f.Ratio), Target: f.Target, Met: f.Met, Load: finite(f.Load)})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// num formats a figure with three significant digits, thousands spaced.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		s := fmt.Sprintf("%.0f", v)
		var out []byte
		for i, c := range []byte(s) {
			if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
				out = append(out, ' ')
			}
			out = append(out, c)
		}
		return string(out)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// percentiles returns the p-quantiles (nearest rank) of ds, which it sorts.
func percentiles(ds []time.Duration, ps ...float64) []time.Duration {
	out := make([]time.Duration, len(ps))
	if len(ds) == 0 {
		return out
	}
	slices.Sort(ds)
	for i, p := range ps {
		k := int(math.Ceil(p*float64(len(ds)))) - 1
		out[i] = ds[min(max(k, 0), len(ds)-1)]
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (p perTx) String() string {
	s := fmt.Sprintf("database backends %.1f µs CPU", float64(p.backends.Nanoseconds())/1000)
	if p.workers > 0 {
		s = fmt.Sprintf("stage programs %.1f µs CPU, ", float64(p.workers.Nanoseconds())/1000) + s
	}
	return s + fmt.Sprintf(" (the server made %d checkpoints meanwhile)", p.checkpoints)
}
