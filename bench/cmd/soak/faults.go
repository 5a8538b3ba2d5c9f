package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"
)

// The scheduled faults.
const (
	workerKill      = "worker kill -9"
	terminate       = "pg_terminate_backend (dispatcher sessions)"
	serverCrash     = "server crash (immediate stop)"
	dispatcherKill  = "dispatcher kill -9 + restart"
	serverRestart   = "PostgreSQL restart (fast stop)"
	dispatcherTerm  = "dispatcher SIGTERM + restart"
	failover        = "failover to the streaming standby"
	standbyTakeover = "dispatcher standby takeover (active kill -9)"
)

// allKinds are the scheduled faults, in the order they are injected; the
// server's need the private cluster.
var allKinds = []struct {
	name   string
	server bool
}{
	{workerKill, false},
	{terminate, false},
	{serverCrash, true},
	{dispatcherKill, false},
	{serverRestart, true},
	{dispatcherTerm, false},
	{failover, true},
	{standbyTakeover, false},
}

// faultKinds are the kinds a run injects in turn: the server's only with
// a private cluster; without the dispatcher's outright kills when
// noSigkill (a run that judges the statistics' identity, which such a
// kill breaks: pepsi-stats(1)).
func faultKinds(cluster, noSigkill bool) []string {
	var ks []string
	for _, k := range allKinds {
		if noSigkill && (k.name == dispatcherKill || k.name == standbyTakeover) {
			continue
		}
		if cluster || !k.server {
			ks = append(ks, k.name)
		}
	}
	return ks
}

// One message in every `every` gets a fault of its own in its payload.
const every = 20000

var payloadFaults = []struct{ kind, payload string }{
	{"hang (fails by MAX_RUNTIME)", "parse=advance:enrich enrich=hang deliver=finish"},
	{"garbage output (fails)", "parse=advance:enrich enrich=advance:deliver deliver=garbage"},
	{"hang once, then retried", "parse=hangonce:enrich enrich=advance:deliver deliver=finish"},
	{"garbage once, then retried", "parse=advance:enrich enrich=garbageonce:deliver deliver=finish"},
	{"crash once, then retried", "parse=advance:enrich enrich=advance:deliver deliver=crashonce"},
}

const plain = "parse=advance:enrich enrich=advance:deliver deliver=finish"

// markInflight records the messages running now as in flight at a fault.
func (s *soak) markInflight() {
	s.exec("INSERT INTO soak_inflight SELECT id FROM pepsi.state WHERE status = 'running' ON CONFLICT DO NOTHING")
}

func (s *soak) inject(kind string) error {
	switch kind {
	case workerKill:
		// One of the active dispatcher's workers (not an orphan left by a
		// killed one).
		var pids []int
		for deadline := time.Now().Add(30 * time.Second); len(pids) == 0 && time.Now().Before(deadline); {
			for _, pid := range s.liveWorkers() {
				if parent(pid) == s.active.cmd.Process.Pid {
					pids = append(pids, pid)
				}
			}
			if len(pids) == 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if len(pids) == 0 {
			return errors.New("no live worker")
		}
		s.markInflight()
		return syscall.Kill(pids[rand.N(len(pids))], syscall.SIGKILL)

	case terminate:
		s.markInflight()
		n := s.query(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend'
			  AND pid <> pg_backend_pid() AND application_name NOT LIKE 'testworker %'`)
		if n == 0 {
			return errors.New("no session to terminate")
		}
		// The dispatcher reconnects and keeps working.
		time.Sleep(2 * time.Second)
		if s.active.done() {
			return fmt.Errorf("the dispatcher exited (%v)", s.active.err)
		}
		return nil

	case serverRestart, serverCrash:
		// The current primary, whichever node a failover left it on.
		mode := "fast"
		if kind == serverCrash {
			mode = "immediate"
		}
		s.markInflight()
		err := s.cluster.restart(mode)
		s.reconnect()
		return err

	case failover:
		s.markInflight()
		err := s.cluster.failover()
		s.reconnect()
		return err

	case dispatcherKill:
		// Frozen first, so that what runs is what it had in flight.
		_ = s.active.cmd.Process.Signal(syscall.SIGSTOP)
		s.markInflight()
		s.active.stop(syscall.SIGKILL)
		s.active = s.startDispatcher(false)
		return s.active.waitLog("dispatcher started", 1, 2*time.Minute)

	case dispatcherTerm:
		code := s.active.stop(syscall.SIGTERM)
		if n := s.query("SELECT count(*) FROM pepsi.state WHERE status = 'running'"); n != 0 {
			s.note("%d messages left running after SIGTERM", n)
		}
		s.active = s.startDispatcher(false)
		if code != 0 {
			return fmt.Errorf("exit %d on SIGTERM", code)
		}
		return s.active.waitLog("dispatcher started", 1, 2*time.Minute)

	case standbyTakeover:
		s.standby = s.startDispatcher(true)
		if err := s.standby.waitLog("standby: waiting for the dispatcher lock", 1, time.Minute); err != nil {
			return err
		}
		_ = s.active.cmd.Process.Signal(syscall.SIGSTOP)
		s.markInflight()
		s.active.stop(syscall.SIGKILL)
		s.active, s.standby = s.standby, nil
		if err := s.active.waitLog("standby: took over the dispatcher lock", 1, time.Minute); err != nil {
			return err
		}
		return s.active.waitLog("dispatcher started", 1, time.Minute)
	}
	return fmt.Errorf("unknown fault %q", kind)
}
