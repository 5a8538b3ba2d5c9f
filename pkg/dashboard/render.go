package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// contentSecurityPolicy lets a page load scripts, styles and images from
// this server only: no inline script, no script from elsewhere, no
// framing, and forms that post back here alone.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// hsts is the Strict-Transport-Security of a response over TLS: a year,
// this host only (the others of its domain are not this server's to say).
const hsts = "max-age=31536000"

// secure sets the headers every response carries: the policy, no caching
// (a page, /metrics, an error; the static files say otherwise), and over
// TLS, HSTS.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header(), r)
		h.ServeHTTP(w, r)
	})
}

func securityHeaders(hd http.Header, r *http.Request) {
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	if r.TLS != nil {
		hd.Set("Strict-Transport-Security", hsts)
	}
}

// staticHandler serves the embedded style sheet and script.
func staticHandler() http.Handler {
	return http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		sub, _ := fs.Sub(staticFiles, "static")
		http.FileServerFS(sub).ServeHTTP(w, r)
	}))
}

// view is what the layout shows around a page; Page is the page's own
// data, and all of it in its JSON form.
type view struct {
	Title   string
	Nav     string // the tab to mark: overview, failures or messages
	User    string // "" when nobody is signed in
	CanAct  bool
	Refresh int // seconds between reloads of the page, 0: none
	// Updated is when the page's data were read; zero: the page has no
	// "updated N s ago" line (nor auto-refresh).
	Updated time.Time
	// RefreshURL turns auto-refresh on (every RefreshEvery seconds) or,
	// while it is on, off.
	RefreshURL   string
	RefreshEvery int
	Version      string
	Now          time.Time
	Page         any
}

// pages are the parsed templates, one set per page.
type pages struct {
	sets map[string]*template.Template
}

var funcs = template.FuncMap{
	"ago":     ago,
	"age":     ageSeconds,
	"ts":      timestamp,
	"num":     number,
	"str":     optString,
	"rate":    rate,
	"queryOf": queryOf,
	"join":    func(s []string) string { return strings.Join(s, ", ") },
	"pct":     percent,
	"perMin":  perMinute,
	"unix":    func(t time.Time) int64 { return t.Unix() },
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"cut":     cut,
	"long":    func(s string) bool { return len(s) > cutAt },
	"size":    func(s string) string { return number(int64(len(s))) },
	"until":   until,
	"wait":    waitOf,
}

func loadPages() *pages {
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		panic(err)
	}
	p := &pages{sets: map[string]*template.Template{}}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		p.sets[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", n))
	}
	return p
}

// wantsJSON reports whether r asks for JSON: ?format=json (or a form
// field format=json), or an Accept header that prefers it to HTML.
func wantsJSON(r *http.Request) bool {
	if f := r.FormValue("format"); f != "" {
		return f == "json"
	}
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html")
}

// render writes page name with v, or v.Page as JSON when r asks for it.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, v view) {
	w.Header().Set("Cache-Control", "no-store")
	if wantsJSON(r) {
		d.writeJSON(w, r, status, v.Page)
		return
	}
	v.User, v.CanAct = d.opts.Auth.canAct(r)
	v.Version, v.Now = d.opts.Version, time.Now()
	if !v.Updated.IsZero() {
		v.RefreshEvery = listRefresh(d.opts.Refresh)
		q := r.URL.Query()
		q.Del("format")
		if v.Refresh > 0 {
			v.RefreshEvery = v.Refresh
			q.Set("refresh", "0")
		} else {
			q.Set("refresh", strconv.Itoa(v.RefreshEvery))
		}
		v.RefreshURL = r.URL.Path + "?" + q.Encode()
	}
	var buf bytes.Buffer
	if err := d.pages.sets[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		d.log.Error("dashboard: rendering a page failed", "page", name, "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// writeJSON answers with v as JSON, encoded whole before anything is
// sent: a value that cannot be encoded is a logged error and a 500, never
// a 200 with an empty or partial body.
func (d *Dashboard) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		d.log.Error("dashboard: encoding JSON failed", "path", r.URL.Path, "err", err)
		buf.Reset()
		_ = enc.Encode(problem{http.StatusInternalServerError, "encoding the answer failed: " + err.Error()})
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// problem is an error page's data.
type problem struct {
	Status int    `json:"status"`
	Error  string `json:"error"`
}

// fail answers with an error page (or JSON) saying msg.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	d.render(w, r, status, "error", view{Title: http.StatusText(status), Page: problem{status, msg}})
}

// dbFailed answers a request whose database work failed, and logs why.
func (d *Dashboard) dbFailed(w http.ResponseWriter, r *http.Request, err error) {
	d.log.Warn("dashboard: reading the database failed", "path", r.URL.Path, "err", err)
	d.fail(w, r, http.StatusServiceUnavailable, "the database: "+err.Error())
}

func (d *Dashboard) notFound(w http.ResponseWriter, r *http.Request) {
	d.fail(w, r, http.StatusNotFound, "no such page: "+r.URL.Path)
}

// crossOrigin refuses a request that would change something from another
// origin (http.CrossOriginProtection's verdict).
func (d *Dashboard) crossOrigin(w http.ResponseWriter, r *http.Request) {
	d.log.Warn("dashboard: refused a cross-origin request", "method", r.Method, "path", r.URL.Path,
		"origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
	d.fail(w, r, http.StatusForbidden, "cross-origin request refused: an action must be posted from this dashboard's own pages")
}
