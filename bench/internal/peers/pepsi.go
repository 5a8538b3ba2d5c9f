package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// pepsiReport is the report of `pepsi-bench --format json`.
type pepsiReport struct {
	Header  []string      `json:"header"`
	Figures []pepsiFigure `json:"figures"`
	Notes   []string      `json:"notes"`
	Took    float64       `json:"took_seconds"`
}

type pepsiFigure struct {
	Key     string   `json:"key"`
	Name    string   `json:"name"`
	Value   *float64 `json:"value"`
	Unit    string   `json:"unit"`
	Ceiling *float64 `json:"ceiling"`
	Of      string   `json:"of"`
	Ratio   *float64 `json:"ratio"`
	Target  string   `json:"target"`
	Met     string   `json:"met"`
	Load    *float64 `json:"load"`
}

// figure returns the figure with key, or an error.
func (r *pepsiReport) figure(key string) (pepsiFigure, error) {
	for _, f := range r.Figures {
		if f.Key == key {
			if f.Value == nil {
				return f, fmt.Errorf("pepsi-bench: figure %s has no value", key)
			}
			return f, nil
		}
	}
	return pepsiFigure{}, fmt.Errorf("pepsi-bench: no figure %s in its report", key)
}

// runPepsiBench runs `pepsi-bench --pepsi EXE --format json` (lab is
// pepsi-bench, exe the pepsi whose dispatcher it measures) with args on
// the server of dsn (PEPSI_DSN; no configuration file) and returns its
// report. Its progress goes to our standard error.
func runPepsiBench(ctx context.Context, lab, exe, dsn, database string, timeout time.Duration, args ...string) (*pepsiReport, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := append([]string{"--pepsi", exe, "--database", database, "--format", "json"}, args...)
	cmd := exec.CommandContext(ctx, lab, argv...)
	cmd.Env = append(os.Environ(), "PEPSI_DSN="+dsn, "PEPSI_CONFIG=")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %v: %w", lab, argv, err)
	}
	var r pepsiReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("%s %v: its report is not JSON: %w", lab, argv, err)
	}
	return &r, nil
}

// pepsiStages runs one status-line pipeline of k no-op stages with n
// messages and 64 workers (pepsi-bench's wide step) and returns its stage
// passes per second and the figures around it.
func pepsiStages(ctx context.Context, lab, exe, dsn, database string, k, n int, timeout time.Duration) (passes pepsiFigure, rep *pepsiReport, err error) {
	rep, err = runPepsiBench(ctx, lab, exe, dsn, database, timeout,
		"--only", "wide", "--stages", strconv.Itoa(k), "--messages", strconv.Itoa(n))
	if err != nil {
		return passes, nil, err
	}
	passes, err = rep.figure("wide.passes")
	return passes, rep, err
}
