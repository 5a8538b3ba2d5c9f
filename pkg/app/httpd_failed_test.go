package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// failingStage fails every message itself, with pepsi.fail(), and
// answers 0: every pass ends ok, every message ends failed.
const failingStage = `#!/bin/sh
while read id; do
	if psql -X -q -v ON_ERROR_STOP=1 "$PEPSI_DSN" -c "select pepsi.fail($id, 'no such customer')" >/dev/null; then
		echo 0
	else
		echo "1 # psql failed"
	fi
done
`

// TestHTTPDFailedMessages: a stage that dead-letters every message with
// pepsi.fail() makes no failed pass, and the overview says so, and counts
// its failed messages beside: "20 failed messages" in its failures, and
// the chart's lane of failed messages drawn (not green alone).
func TestHTTPDFailedMessages(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatal("psql is needed for the shell stage program: apt-get install postgresql-client")
	}
	db, dsn := pgtest.New(t)
	stage := filepath.Join(t.TempDir(), "fail.sh")
	if err := os.WriteFile(stage, []byte(failingStage), 0o755); err != nil {
		t.Fatal(err)
	}
	env(t, dsn, "[pepsi-dispatch]\nSTATS_INTERVAL = 1\n\n[stage-work]\nPROGRAM = "+stage+"\nPARALLELISM = 2\n")
	if _, err := db.EnqueueBulk(context.Background(), queue.Bulk{Stage: "work", Payloads: make([][]byte, 20)}); err != nil {
		t.Fatal(err)
	}
	// httpd first: its charts count the passes from its first sample on.
	h := startPepsi(t, "httpd", "--listen", "127.0.0.1:0")
	base := "http://" + h.addr(t, "listening")
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	type overview struct {
		Stages []struct {
			Stage    string `json:"stage"`
			Failures struct {
				Known    bool  `json:"known"`
				Failed   int64 `json:"failed"`
				Passes   int64 `json:"passes"`
				Messages int64 `json:"failed_messages"`
			} `json:"failures"`
			Throughput []struct {
				FailedMessages int64 `json:"failed_messages"`
			} `json:"throughput"`
		} `json:"stages"`
	}
	var o overview
	testkit.Wait(t, "the overview sampled", time.Minute, func() bool {
		o = overview{}
		if err := json.Unmarshal([]byte(get("/?format=json")), &o); err != nil {
			t.Fatal(err)
		}
		return len(o.Stages) == 1 && o.Stages[0].Failures.Known
	}, h.stderr)
	d := startPepsi(t, "dispatch")
	testkit.Wait(t, "20 failed messages", time.Minute, func() bool {
		return queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE status = 'failed' AND error = 'no such customer'") == 20
	}, d.stderr)
	testkit.Wait(t, "the overview's failures sampled", time.Minute, func() bool {
		o = overview{}
		if err := json.Unmarshal([]byte(get("/?format=json")), &o); err != nil {
			t.Fatal(err)
		}
		return len(o.Stages) == 1 && o.Stages[0].Failures.Known && o.Stages[0].Failures.Passes == 20
	}, h.stderr)
	f := o.Stages[0].Failures
	if f.Failed != 0 || f.Messages != 20 {
		t.Errorf("failures: %+v, want no failed pass of 20 and 20 failed messages", f)
	}
	var inBars int64
	for _, b := range o.Stages[0].Throughput {
		inBars += b.FailedMessages
	}
	if inBars != 20 {
		t.Errorf("the chart's bars hold %d failed messages, want 20", inBars)
	}
	page := get("/")
	for _, want := range []string{">20 failed messages</a>", `<rect class="dead"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the overview lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, `<span class="passes"`) {
		t.Errorf("the overview shows a failed pass where none failed:\n%s", page)
	}
}
