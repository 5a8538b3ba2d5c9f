package dashboard_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"html"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/dashboard"
	"github.com/pepsi-dev/pepsi/pkg/metrics"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The tests run the dashboard as pepsi httpd does (metrics.Server with
// dashboard.WebServe, the exporter beside it) on a fresh database of a
// real PostgreSQL, and talk to it over HTTP.

// Users of the web configuration the tests write: alice may act, bob may
// only look.
const (
	alicePass = "alice's secret"
	bobPass   = "bob's secret"
)

// site is a dashboard under test.
type site struct {
	t    testing.TB
	db   *queue.DB
	dsn  string
	conn *pgx.Conn // for the tests' own statements
	base string
	logs *testkit.Buffer
	dash *dashboard.Dashboard
	src  *metrics.Source // the dashboard's database
}

// siteOptions are what a test changes.
type siteOptions struct {
	users   bool     // write a web configuration with alice and bob
	actors  []string // ACTION_USERS
	stages  []string
	tls     string // a tls_server_config block for the web configuration
	options func(*dashboard.Options)
	// noSampler leaves the dashboard's sampler off (its charts have only
	// what the test adds).
	noSampler bool
	// countWait: a page waits for the counts countWait at most, as served;
	// else (the tests' pages show every count) until they are in.
	countWait bool
}

// ctx returns a context that ends with the test (or after two minutes).
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// writeWebConfig writes a web configuration with alice and bob, and tls
// (a tls_server_config block, or "").
func writeWebConfig(t testing.TB, tls string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("basic_auth_users:\n")
	for _, u := range [][2]string{{"alice", alicePass}, {"bob", bobPass}} {
		h, err := bcrypt.GenerateFromPassword([]byte(u[1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("  " + u[0] + ": " + string(h) + "\n")
	}
	b.WriteString(tls)
	path := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newSite starts a dashboard on a new database.
func newSite(t testing.TB, o siteOptions) *site {
	t.Helper()
	db, dsn := pgtest.New(t)
	conn, err := pgx.Connect(ctx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	s := &site{t: t, db: db.DB, dsn: dsn, conn: conn, logs: &testkit.Buffer{}}
	s.start(o)
	return s
}

// again starts another dashboard on s's database, as a restart of pepsi
// httpd would (or a second one beside it), with its own logs.
func (s *site) again(o siteOptions) *site {
	s.t.Helper()
	s2 := &site{t: s.t, db: s.db, dsn: s.dsn, conn: s.conn, logs: &testkit.Buffer{}}
	s2.start(o)
	return s2
}

// start starts the dashboard of s on its database.
func (s *site) start(o siteOptions) {
	t, dsn := s.t, s.dsn
	t.Helper()
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	webConfig := ""
	if o.users {
		webConfig = writeWebConfig(t, o.tls)
	}
	if err := dashboard.CheckWebConfig(webConfig); err != nil {
		t.Fatal(err)
	}
	auth, err := dashboard.NewAuth(webConfig, o.actors)
	if err != nil {
		t.Fatal(err)
	}
	src := metrics.NewPoolSource(dsn, pgtest.App, 8)
	t.Cleanup(src.Close) // before pgtest drops the database
	s.src = src
	opts := dashboard.Options{
		DB:      src.DB,
		Stages:  o.stages,
		Auth:    auth,
		Metrics: metrics.NewStats(metrics.StatsOptions{Source: src, Stages: o.stages, MaxAge: -1, Version: "test", Log: log}).Handler(),
		Version: "test",
		Log:     log,
		Refresh: -1,
	}
	if o.options != nil {
		o.options(&opts)
	}
	dash := dashboard.New(opts)
	if !o.countWait {
		dash.WaitForCounts()
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		if !o.noSampler {
			dash.Run(runCtx)
		}
	}()
	srv := metrics.NewServer(dash.Handler(), log)
	srv.Serve = dashboard.WebServe(webConfig, log)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		<-ran
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	s.base = dashboard.Scheme(webConfig) + "://" + srv.Addr()
	s.dash = dash
}

// exec runs a statement of the test's own.
func (s *site) exec(sql string, args ...any) {
	s.t.Helper()
	if _, err := s.conn.Exec(ctx(s.t), sql, args...); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
}

// enqueue adds n messages at stage and returns their ids.
func (s *site) enqueue(stage string, n int, payload []byte) []int64 {
	s.t.Helper()
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = payload
	}
	ids, err := s.db.EnqueueBulk(ctx(s.t), queue.Bulk{Stage: stage, Payloads: ps})
	if err != nil {
		s.t.Fatal(err)
	}
	return ids
}

// fail makes ids failed with error reason.
func (s *site) fail(ids []int64, reason string) {
	s.t.Helper()
	s.exec(`UPDATE pepsi.state SET status = 'failed', error = $2, attempts = 2, updated_at = now() - interval '1 minute' WHERE id = ANY($1)`, ids, reason)
}

// state is a queue row as the tests read it.
type state struct {
	Stage, Status                 string
	Attempts                      int
	Error, DispatchError, Timeout *string
}

// states reads the rows of ids, in their order; a missing row is the zero state.
func (s *site) states(ids []int64) []state {
	s.t.Helper()
	out := make([]state, len(ids))
	for i, id := range ids {
		err := s.conn.QueryRow(ctx(s.t), `SELECT stage, status, attempts, error, dispatch_error, timeout::text FROM pepsi.state WHERE id = $1`, id).
			Scan(&out[i].Stage, &out[i].Status, &out[i].Attempts, &out[i].Error, &out[i].DispatchError, &out[i].Timeout)
		if err != nil && err != pgx.ErrNoRows {
			s.t.Fatal(err)
		}
	}
	return out
}

// req is how a request is made: as whom, from where, asking for what.
type req struct {
	user, pass string
	origin     string // the Origin header
	fetchSite  string // the Sec-Fetch-Site header
	accept     string
	noFollow   bool // answer a redirect with itself
}

var alice = req{user: "alice", pass: alicePass}
var bob = req{user: "bob", pass: bobPass}

// response is what came back.
type response struct {
	code   int
	header http.Header
	body   string
	text   string // body with HTML's character references resolved
}

// client is the tests' HTTP client; it trusts any certificate (the TLS
// test's is made up).
var client = &http.Client{Timeout: time.Minute, Transport: insecureTransport()}

// noFollow is client without following redirects.
var noFollow = &http.Client{Timeout: time.Minute, Transport: insecureTransport(),
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends a request to the site; form, when not nil, is posted.
func (s *site) do(method, path string, form url.Values, o req) response {
	s.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r, err := http.NewRequest(method, s.base+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if o.user != "" {
		r.SetBasicAuth(o.user, o.pass)
	}
	if o.origin != "" {
		r.Header.Set("Origin", o.origin)
	}
	if o.fetchSite != "" {
		r.Header.Set("Sec-Fetch-Site", o.fetchSite)
	}
	if o.accept != "" {
		r.Header.Set("Accept", o.accept)
	}
	cl := client
	if o.noFollow {
		cl = noFollow
	}
	resp, err := cl.Do(r)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b), html.UnescapeString(string(b))}
}

// get fetches path and fails unless the status is want.
func (s *site) get(path string, want int, o req) string {
	s.t.Helper()
	r := s.do("GET", path, nil, o)
	if r.code != want {
		s.t.Fatalf("GET %s: %d, want %d\n%s", path, r.code, want, r.body)
	}
	return r.body
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths.
func selfSigned(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "pepsi test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// getJSON fetches path as JSON into v.
func (s *site) getJSON(path string, o req, v any) {
	s.t.Helper()
	if !strings.Contains(path, "format=") {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "format=json"
	}
	body := s.get(path, http.StatusOK, o)
	if err := json.Unmarshal([]byte(body), v); err != nil {
		s.t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// holdLock takes the single-dispatcher lock as a dispatcher does, until
// the test ends.
func holdLock(t *testing.T, dsn string) *queue.Listener {
	t.Helper()
	l, err := queue.Dial(ctx(t), dsn, "pepsi_ingress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	if _, err := l.TryLock(ctx(t)); err != nil {
		t.Fatal(err)
	}
	return l
}

// standby waits for the single-dispatcher lock as dispatch --standby
// does, until the test ends.
func standby(t *testing.T, dsn string) *queue.Listener { return standbyFor(t, dsn, "") }

// ownStages takes the locks of a dispatcher with a stage set, as
// dispatch --stages does, until the test ends.
func ownStages(t *testing.T, dsn string, stages ...string) *queue.Listener {
	t.Helper()
	l, err := queue.Dial(ctx(t), dsn, "pepsi_ingress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	if err := l.TakeStages(ctx(t), stages, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}
	return l
}

// standbyFor waits for stage's lock as a standby of a set with that
// stage does (for "", the database-wide lock as one without a set), until
// the test ends.
func standbyFor(t *testing.T, dsn, stage string) *queue.Listener {
	t.Helper()
	l, _ := stoppableStandby(t, dsn, stage)
	return l
}

// stoppableStandby is standbyFor, and a function that stops the standby
// before the test ends (its session gone).
func stoppableStandby(t *testing.T, dsn, stage string) (*queue.Listener, func()) {
	t.Helper()
	l, err := queue.Dial(ctx(t), dsn, "pepsi_ingress")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.WaitFor(wctx, stage, stage == "")
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			l.Close(context.Background())
		})
	}
	t.Cleanup(stop)
	return l, stop
}

// insecureTransport is http.DefaultTransport trusting any certificate.
func insecureTransport() http.RoundTripper {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the tests' own certificate
	return tr
}

// oneMessage is one message at stage with headers and payload.
func oneMessage(stage string, headers map[string]string, payload []byte) queue.Bulk {
	return queue.Bulk{Stage: stage, Headers: headers, Payloads: [][]byte{payload}}
}
