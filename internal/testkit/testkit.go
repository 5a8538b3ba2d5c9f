// Package testkit is what pepsi's own tests share: a log buffer safe for
// concurrent writers, a wait with a deadline, an HTTP GET, the queue's
// invariant check, builds of the programs tests run (the test worker among
// them), and Site, a test database with its pepsi.conf, on which the
// dispatcher tests' bundle, workertest.Pipeline, the metrics test and the
// app's fault tests are built.
//
// Every function takes the test's testing.TB and fails the test rather than
// return an error. A package that calls Build (or Worker) runs its tests
// through Main, which removes the builds at the end.
//
// testkit must not import pkg/dispatch, pkg/config or anything else whose own
// (internal) tests use it: it imports pgtest, and so pkg/queue, and no more.
package testkit

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer keeps what is written to it, safe for concurrent writers (slog
// handlers, a child process's stderr) and readers. The zero value is
// ready; a nil *Buffer reads as empty.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns all that was written.
func (b *Buffer) String() string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// pollInterval is how often Wait tries its condition.
const pollInterval = 20 * time.Millisecond

// Wait polls cond until it holds; once timeout has passed without it, it
// fails t (Fatalf) saying what it waited for and showing logs.
func Wait(t testing.TB, what string, timeout time.Duration, cond func() bool, logs ...fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s%s", timeout, what, show(logs))
		}
		time.Sleep(pollInterval)
	}
}

// show renders the logs that are not empty for a failure message.
func show(logs []fmt.Stringer) string {
	var parts []string
	for _, l := range logs {
		if l == nil {
			continue
		}
		if s := l.String(); s != "" {
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; log:\n" + strings.Join(parts, "\n--- next log ---\n")
}

// httpClient is Get's: a request that takes a minute has failed.
var httpClient = &http.Client{Timeout: time.Minute}

// Get fetches url and returns the status code and the body; a request
// that fails fails t.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}
