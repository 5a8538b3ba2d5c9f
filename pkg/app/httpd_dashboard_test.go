package app

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"golang.org/x/crypto/bcrypt"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// webConfig writes a web configuration file with the users (name,
// password) and returns its path.
func webConfig(t *testing.T, users ...string) string {
	t.Helper()
	text := "basic_auth_users:\n"
	for i := 0; i+1 < len(users); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(users[i+1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		text += "  " + users[i] + ": " + string(h) + "\n"
	}
	path := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHTTPDListenDefault: without --listen, pepsi httpd serves this
// machine only.
func TestHTTPDListenDefault(t *testing.T) {
	app := New("test", io.Discard, io.Discard, strings.NewReader(""))
	for _, f := range app.Command("httpd").Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "listen" {
			if sf.Value != "127.0.0.1:9188" {
				t.Errorf("--listen defaults to %q", sf.Value)
			}
			return
		}
	}
	t.Error("no --listen")
}

// TestHTTPDWebConfigErrors: a web configuration or ACTION_USERS that
// cannot work is one line naming the flag or the key, exit 2, before
// anything listens.
func TestHTTPDWebConfigErrors(t *testing.T) {
	good := webConfig(t, "alice", "a")
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte("basic_auth_users:\n  alice: not-a-bcrypt-hash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(t.TempDir(), "unknown.yml")
	if err := os.WriteFile(unknown, []byte("basic_auth_user:\n  alice: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		conf string
		args []string
		want string
	}{
		{"", []string{"--web.config.file", "/nonexistent/web.yml"}, "pepsi httpd: --web.config.file /nonexistent/web.yml: open /nonexistent/web.yml: no such file or directory"},
		{"", []string{"--web.config.file", bad}, "pepsi httpd: --web.config.file " + bad + ": crypto/bcrypt"},
		{"", []string{"--web.config.file", unknown}, "field basic_auth_user not found"},
		{"", []string{"--web.config.file", ""}, "pepsi httpd: --web.config.file: give a file"},
		{"[pepsi-httpd]\nWEB_CONFIG_FILE = missing.yml\n", nil, "pepsi.conf:2: WEB_CONFIG_FILE "},
		{"[pepsi-httpd]\nACTION_USERS = alice\n", nil, "pepsi.conf:2: ACTION_USERS: users who may act need a web configuration file with basic_auth_users"},
		{"[pepsi-httpd]\nWEB_CONFIG_FILE = " + good + "\nACTION_USERS = alice, bob\n", nil, `pepsi.conf:3: ACTION_USERS: "bob" is not a user of ` + good + " (its basic_auth_users: alice)"},
		{"[pepsi-httpd]\nACTION_USERS = bob\n", []string{"--web.config.file", good}, `pepsi.conf:2: ACTION_USERS: "bob" is not a user of ` + good},
	} {
		env(t, "postgres:///x", tc.conf)
		r := pepsi(t, "", append([]string{"httpd", "--listen", "127.0.0.1:0"}, tc.args...)...)
		r.wantCode(t, 2)
		r.wantOneError(t, tc.want)
	}
}

// TestHTTPDDashboard runs pepsi httpd with a web configuration and
// ACTION_USERS: every page and /metrics need a user, the one who may act
// retries a message, and it is logged.
func TestHTTPDDashboard(t *testing.T) {
	db, dsn := pgtest.New(t)
	ids, err := db.EnqueueBulk(context.Background(), queue.Bulk{Stage: "work", Payloads: [][]byte{[]byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(ids[0], 10)
	if c := queryInt(t, dsn, "WITH u AS (UPDATE pepsi.state SET status = 'failed', error = 'no' RETURNING 1) SELECT count(*) FROM u"); c != 1 {
		t.Fatal(c)
	}
	web := webConfig(t, "alice", "a-pass", "bob", "b-pass")
	env(t, dsn, "[pepsi-httpd]\nACTION_USERS = alice\n\n[stage-work]\nPROGRAM = /bin/cat\n")
	p := startPepsi(t, "httpd", "--listen", "127.0.0.1:0", "--web.config.file", web)
	base := "http://" + p.addr(t, "listening")
	do := func(method, path, user, pass string, form url.Values) (int, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		r, _ := http.NewRequest(method, base+path, body)
		if form != nil {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/", "/metrics", "/healthz", "/messages/" + id} {
		if code, _ := do("GET", path, "", "", nil); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a user: %d", path, code)
		}
		if code, _ := do("GET", path, "bob", "b-pass", nil); code != http.StatusOK {
			t.Errorf("GET %s as bob: %d", path, code)
		}
	}
	if _, body := do("GET", "/metrics", "bob", "b-pass", nil); !strings.Contains(body, `pepsi_queue_messages{stage="work",status="failed"} 1`) {
		t.Errorf("/metrics:\n%s", body)
	}
	if code, _ := do("POST", "/retry", "bob", "b-pass", url.Values{"id": {id}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Errorf("bob's retry: %d", code)
	}
	if code, body := do("POST", "/retry", "alice", "a-pass", url.Values{"id": {id}, "confirm": {"yes"}}); code != http.StatusOK || !strings.Contains(body, "Retried 1 message") {
		t.Errorf("alice's retry: %d\n%s", code, body)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE status = 'pending' AND error IS NULL"); n != 1 {
		t.Errorf("%d pending after the retry", n)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
	logs := p.stderr.String()
	if !strings.Contains(logs, `msg="dashboard: retried" user=alice`) || strings.Contains(logs, "a-pass") {
		t.Errorf("logs:\n%s", logs)
	}
}
