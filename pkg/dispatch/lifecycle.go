package dispatch

import (
	"syscall"
	"time"
)

const sigKill = syscall.SIGKILL

// spawn starts a worker for p, or puts p in cooldown when its PROGRAM
// cannot start.
func (d *Dispatcher) spawn(p *pool, now time.Time) *worker {
	argv := append([]string(nil), p.cfg.Program...)
	if cf := d.cfg.Dispatch.ConfigFile; cf != "" {
		argv = append(argv, "-c", cf)
	}
	d.seq++
	w := &worker{seq: d.seq, pool: p, idleAt: now, tracer: d.tracer}
	proc, err := startProcess(w, spawnSpec{
		argv:   argv,
		env:    append(d.env[:len(d.env):len(d.env)], "PEPSI_STAGE="+p.cfg.Name),
		stage:  p.cfg.Name,
		log:    d.log,
		obs:    d.obs,
		events: d.events,
		feed:   p.cfg.QueueLimit + 1,
	})
	if err != nil {
		d.obs.WorkerStartFailed(p.cfg.Name)
		d.cooldown(p, now, "cannot start PROGRAM: "+err.Error())
		return nil
	}
	d.obs.WorkerStarted(p.cfg.Name)
	w.proc = proc
	p.workers = append(p.workers, w)
	d.due(now.Add(d.cfg.Dispatch.WorkerIdleTimeout))
	if p.cooling {
		p.cooling = false
		d.log.Info("stage recovered: worker started", "stage", p.cfg.Name, "pid", proc.pid)
	} else {
		d.log.Debug("worker started", "stage", p.cfg.Name, "pid", proc.pid)
	}
	return w
}

// cooldown holds p off claims and starts for SPAWN_COOLDOWN; the first
// cooldown of an episode is logged.
func (d *Dispatcher) cooldown(p *pool, now time.Time, why string) {
	p.coolUntil = now.Add(d.cfg.Dispatch.SpawnCooldown)
	if !p.cooling {
		p.cooling = true
		d.log.Error("stage held off", "stage", p.cfg.Name, "program", p.cfg.ProgramText,
			"cooldown", d.cfg.Dispatch.SpawnCooldown, "reason", why)
	}
}

// stop tells w to exit: its stdin is closed (and with term, SIGTERM sent);
// it is killed if still running after SHUTDOWN_GRACE.
func (d *Dispatcher) stop(w *worker, now time.Time, term bool) {
	if w.stopping {
		return
	}
	w.stopping = true
	w.killAt = now.Add(d.cfg.Dispatch.ShutdownGrace)
	d.due(w.killAt)
	w.flush()
	close(w.proc.feed)
	if term {
		w.proc.signal(syscall.SIGTERM)
	}
}
