"""pepsi_stage under a real dispatcher (pepsi_stage.testing): the moves, an
exception that rolls the work back, a lost connection, SIGTERM mid-pass,
with a plain and an async def handler. Needs PostgreSQL ($PEPSI_TEST_DSN),
the pepsi binary ($PEPSI_BIN) and contrib/go/stage built ($PEPSI_GO_STAGE);
contrib/python_test.go runs these tests with all three."""

from __future__ import annotations

import os
import time
import unittest

from pepsi_stage.testing import Pipeline, Stage, program, run_stage

HERE = os.path.dirname(os.path.abspath(__file__))
BEHAVE = os.path.join(HERE, "stages", "behave.py")
TABLES = """CREATE TABLE test_work (id bigint, stage text, token bigint);
            CREATE TABLE test_marks (id bigint, what text, pid int)"""


# pepsi.message_row, failing for a message whose payload is "bad".
BAD_READ = """CREATE OR REPLACE FUNCTION pepsi.message_row(p_id bigint) RETURNS SETOF pepsi.message
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (SELECT FROM pepsi.message m WHERE m.id = p_id AND m.payload = 'bad') THEN
        RAISE EXCEPTION 'the read of message % fails', p_id;
    END IF;
    RETURN QUERY SELECT * FROM pepsi.message m WHERE m.id = p_id;
END $$"""


def tables(p: Pipeline) -> None:
    p.execute(TABLES)


def stage(name: str, *args: str, **settings: str) -> Stage:
    return Stage(name, program(BEHAVE, *args), parallelism=2, queue_limit=4, settings=settings)


class TestPipeline(unittest.TestCase):
    def check(self, p: Pipeline) -> None:
        bad = p.check()
        self.assertEqual(bad, [], "invariants broken; log:\n" + p.logs())

    def test_moves(self) -> None:
        """Three stages (Python, Go, async Python): advance, finish, pause,
        fail, and an exception whose work is rolled back, at each Python stage."""
        go = os.environ.get("PEPSI_GO_STAGE", "")
        if not go:
            self.fail("PEPSI_GO_STAGE is not set: build contrib/go/stage (go build -o bin/stage ./contrib/go/stage) and name it")
        with Pipeline(
            [
                stage("py", "--next", "go", RETRIES="0"),
                Stage("go", go + " --next pya", parallelism=2, queue_limit=4),
                stage("pya", "--async", RETRIES="0"),
            ]
        ) as p:
            tables(p)
            payloads = [b"x:advance"] * 6 + [b"py:fail", b"py:raise", b"py:pause", b"py:print"]
            payloads += [b"pya:fail", b"pya:raise", b"pya:pause", b"pya:print"]
            ids = p.enqueue("py", *payloads)
            p.wait_settled()
            work = {(i, s) for i, s in p.execute("SELECT id, stage FROM test_work").fetchall()}
            for mid, pl in zip(ids, payloads):
                r = p.row(mid)
                with self.subTest(payload=pl, id=mid):
                    if pl.endswith(b":fail"):
                        at = pl.split(b":")[0].decode()
                        self.assertEqual((r.status, r.stage, r.error), ("failed", at, "asked to fail"))
                        self.assertEqual(r.headers.get(at), "python")
                        self.assertIn((mid, at), work)
                    elif pl.endswith(b":raise"):
                        at = pl.split(b":")[0].decode()
                        self.assertEqual((r.status, r.stage), ("failed", at))
                        self.assertIn("RuntimeError: asked to raise", r.dispatch_error)
                        self.assertNotIn((mid, at), work, "the work of a pass that raised was committed")
                        self.assertNotIn(at, r.headers)
                    else:
                        self.assertEqual((r.status, r.stage, r.dispatch_error), ("done", "pya", ""))
                        self.assertEqual(r.headers, {"py": "python", "go": "go", "pya": "python"})
                        self.assertEqual(r.attempts, 2 if pl == b"pya:pause" else 1)
                        self.assertIn((mid, "py"), work)
                        self.assertIn((mid, "pya"), work)
            # The statistics are written a moment after the last settle.
            p.wait_for("two paused passes in the statistics", 60,
                       lambda: bool(p.one("SELECT coalesce(sum(paused), 0) FROM pepsi.dispatch_stats") == 2))
            tokens = p.one("SELECT count(*) FROM test_work WHERE token IS NOT NULL")
            self.assertGreater(tokens, 0, "no pass had a token: no hello?")
            self.assertIn("a print in a handler", p.logs())
            self.check(p)

    def test_lost_connection(self) -> None:
        """A pass whose session is terminated answers 75: the message goes
        back, uncounted, and the next worker moves it."""
        with Pipeline([stage("py", "--next", "pya"), stage("pya", "--async")]) as p:
            tables(p)
            payloads = [b"py:kill", b"pya:kill", b"x:advance", b"x:advance"]
            ids = p.enqueue("py", *payloads)
            p.wait_settled()
            for mid in ids:
                r = p.row(mid)
                self.assertEqual((r.status, r.stage, r.attempts), ("done", "pya", 1), r)
            for name in ("py", "pya"):
                st = p.stage_stats(name)
                self.assertGreaterEqual(st["not_run"], 1, f"{name}: {st}")
                self.assertEqual(st["failed"], 0, f"{name}: {st}")
            self.assertEqual(p.one("SELECT count(DISTINCT id) FROM test_marks WHERE what = 'killed'"), 2)
            self.check(p)

    def test_sigterm(self) -> None:
        """SIGTERM mid-pass (the dispatcher stopping) ends the worker at
        once, in the handler's own code or in a statement: its work rolled
        back, the message not left running."""
        # Two workers a stage, one message each.
        stages = [Stage(s, program(BEHAVE, *a), parallelism=2, queue_limit=1) for s, a in (("py", ()), ("pya", ("--async",)))]
        with Pipeline(stages, dispatch={"SHUTDOWN_GRACE": "60"}) as p:
            tables(p)
            ids = p.enqueue("py", b"py:hang", b"py:sleep") + p.enqueue("pya", b"pya:hang", b"pya:sleep")
            p.wait_for("four passes hanging", 60, lambda: bool(p.one("SELECT count(*) FROM test_marks WHERE what = 'hanging'") == 4))
            pids = [pid for (pid,) in p.execute("SELECT pid FROM test_marks").fetchall()]
            start = time.monotonic()
            self.assertEqual(p.stop(), 0)
            took = time.monotonic() - start
            self.assertLess(took, 30, "the workers waited for SIGKILL (SHUTDOWN_GRACE 60 s)")
            for pid in pids:
                with self.assertRaises(ProcessLookupError, msg=f"worker {pid} still runs"):
                    os.kill(pid, 0)
            for mid in ids:
                self.assertNotEqual(p.row(mid).status, "running")
            self.assertEqual(p.one("SELECT count(*) FROM test_work"), 0, "the work of a pass stopped by SIGTERM was committed")

    def test_graph(self) -> None:
        """A fan-out and its join: each order spawns its items (none for
        "0"), which finish with results, and the join stage reads them all
        once the last has ended; an order without items goes straight on."""
        graph = os.path.join(HERE, "stages", "graph.py")
        with Pipeline(
            [
                Stage("split", program(graph), parallelism=2, queue_limit=4),
                Stage("item", program(graph), parallelism=2, queue_limit=8),
                Stage("sum", program(graph), queue_limit=4),
            ]
        ) as p:
            p.execute("CREATE TABLE test_joined (id bigint, n int, ok bool)")
            sizes = [3, 0, 4, 1, 0, 9, 2]
            ids = p.enqueue("split", *[str(n).encode() for n in sizes])
            p.wait_settled()
            for mid, n in zip(ids, sizes):
                with self.subTest(order=mid, items=n):
                    r = p.row(mid)
                    self.assertEqual((r.status, r.stage, r.dispatch_error), ("done", "sum", ""))
                    self.assertEqual(p.execute("SELECT n, ok FROM test_joined WHERE id = %s", (mid,)).fetchall(), [(n, True)])
                    done = p.one(
                        "SELECT count(*) FROM pepsi.state s JOIN pepsi.message m USING (id)"
                        " WHERE s.parent = %s AND s.status = 'done' AND m.headers->>'order' = %s",
                        (mid, str(mid)),
                    )
                    self.assertEqual(done, n)
            self.assertEqual(p.one("SELECT count(*) FROM pepsi.state WHERE parent IS NOT NULL"), sum(sizes))
            self.check(p)

    def test_run_stage(self) -> None:
        """run_stage: one stage, payloads in, rows out."""
        rows = run_stage(os.path.join(HERE, "..", "stage.py"), [b"hello", b"", b"retry"])
        self.assertEqual([(r.status, r.error, r.attempts) for r in rows], [("done", "", 1), ("failed", "empty payload", 1), ("done", "", 2)])
        self.assertEqual(rows[0].headers, {"test": "python"})

    def test_next_read_fails(self) -> None:
        """The next message's read goes out with a pass's COMMIT; when that
        read fails, the pass has committed all the same and is answered 0,
        and the next message fails by its own read."""
        with Pipeline([Stage("t", program(BEHAVE), parallelism=1, queue_limit=8, settings={"RETRIES": "0"})]) as p:
            tables(p)
            p.execute(BAD_READ)
            payloads = [b"x:advance", b"bad"] * 15
            ids = p.enqueue("t", *payloads)
            p.wait_settled()
            for mid, pl in zip(ids, payloads):
                r = p.row(mid)
                with self.subTest(id=mid, payload=pl):
                    if pl == b"bad":
                        self.assertEqual(r.status, "failed")
                        self.assertIn(f"the read of message {mid} fails", r.dispatch_error)
                    else:
                        self.assertEqual((r.status, r.dispatch_error, r.headers), ("done", "", {"t": "python"}))
            def answered() -> tuple[float, float]:
                st = p.stage_stats("t")
                return st["processed"], st["failed"]

            p.wait_for("the statistics written", 60, lambda: sum(answered()) == len(payloads))
            self.assertEqual(answered(), (15, 15), p.logs())
            self.check(p)

    def test_one_trip(self) -> None:
        """run_one_trip: the queued work and the move commit together; an
        error in a queued statement fails the pass, rolled back whole."""
        with Pipeline([Stage("t", program(os.path.join(HERE, "stages", "onetrip.py")), queue_limit=4, settings={"RETRIES": "0"})]) as p:
            ids = p.enqueue("t", *[b"x"] * 20)
            p.wait_settled()
            rows = [p.row(i) for i in ids]
            for mid, r in zip(ids, rows):
                if mid % 5:
                    self.assertEqual((r.status, r.headers), ("done", {"t": "onetrip"}))
                else:
                    self.assertEqual(r.status, "failed", r)
                    self.assertIn("division by zero", r.dispatch_error)
                    self.assertEqual(r.headers, {}, "the work of a failed pass was committed")
            self.check(p)


if __name__ == "__main__":
    unittest.main()
