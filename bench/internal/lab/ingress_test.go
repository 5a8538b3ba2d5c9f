package lab

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindPgbench(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	old := pgbenchGlob
	t.Cleanup(func() { pgbenchGlob = old })

	pgbenchGlob = filepath.Join(dir, "lib", "*", "bin", "pgbench")
	_, err := findPgbench("15.20")
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "pgbench not found on PATH") {
		t.Fatalf("without pgbench: %v, want one line saying it is not found", err)
	}

	// Beside the server's binaries: the server's major version first, then the newest.
	for _, v := range []string{"13", "15", "16"} {
		bin := filepath.Join(dir, "lib", v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, "pgbench"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for server, want := range map[string]string{"15.20": "15", "13.1": "13", "17.0": "16"} {
		got, err := findPgbench(server)
		if err != nil || got != filepath.Join(dir, "lib", want, "bin", "pgbench") {
			t.Errorf("server %s: %q, %v; want version %s's", server, got, err, want)
		}
	}

	// PATH wins.
	if err := os.WriteFile(filepath.Join(dir, "pgbench"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findPgbench("15.20"); err != nil || got != filepath.Join(dir, "pgbench") {
		t.Errorf("on PATH: %q, %v", got, err)
	}
}

func TestParsePgbench(t *testing.T) {
	out := `pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: /tmp/ingress-pepsi.sql
scaling factor: 1
query mode: simple
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 9342
number of failed transactions: 0 (0.000%)
latency average = 8.563 ms
initial connection time = 17.218 ms
tps = 934.254822 (without initial connection time)
`
	tps, txs, err := parsePgbench([]byte(out))
	if err != nil || tps != 934.254822 || txs != 9342 {
		t.Errorf("parsePgbench: %v %v %v", tps, txs, err)
	}
	if _, _, err := parsePgbench([]byte("pgbench: error: connection to server failed\n")); err == nil {
		t.Error("parsePgbench: no error without a tps line")
	}
	// A run whose duration went on connecting: run again, longer.
	none := "number of clients: 32\nduration: 1 s\nnumber of transactions actually processed: 0\nnumber of failed transactions: 0 (NaN%)\n"
	if _, _, err := parsePgbench([]byte(none)); !errors.Is(err, errNoTransactions) {
		t.Errorf("parsePgbench of a run with no transaction: %v, want errNoTransactions", err)
	}
}

func TestIngressScript(t *testing.T) {
	plain, pepsi := ingressScript("s1", false), ingressScript("s1", true)
	for _, s := range []string{plain, pepsi} {
		if !strings.Contains(s, "BEGIN;\nINSERT INTO bench.app (account, amount) VALUES (:account, :amount);\n") || !strings.HasSuffix(s, "\nCOMMIT;\n") {
			t.Errorf("script:\n%s", s)
		}
	}
	if !strings.Contains(pepsi, "SELECT pepsi.enqueue('s1', 'payload');") || strings.Contains(pepsi, "outbox") {
		t.Errorf("pepsi script:\n%s", pepsi)
	}
	if !strings.Contains(plain, "INSERT INTO bench.outbox (stage, headers, payload) VALUES ('s1', '{}', 'payload');") || strings.Contains(plain, "enqueue") {
		t.Errorf("plain script:\n%s", plain)
	}
	if s := ingressScript("it's", true); !strings.Contains(s, "'it''s'") {
		t.Errorf("quoting:\n%s", s)
	}
}
