"""The protocol's lines and the configuration, without a database."""

from __future__ import annotations

import os
import tempfile
import unittest

from pepsi_stage import MAX_RESULT, Advance, Fail, Finish, Join, Message, Pause
from pepsi_stage._config import config_arg, ini_dsn
from pepsi_stage._message import PassError, check_move, move_statement
from pepsi_stage._protocol import LineReader, parse_id_line, status_line, trace_of


class TestLines(unittest.TestCase):
    def test_id_lines(self) -> None:
        self.assertEqual(parse_id_line(b"42"), (42, None))
        self.assertEqual(parse_id_line(b" 42  7 "), (42, 7))
        for bad in (b"", b"0", b"-1", b"1 0", b"1 2 3", b"x", b"1 y", b"9223372036854775808"):
            with self.subTest(line=bad), self.assertRaises(ValueError):
                parse_id_line(bad)

    def test_trace_on_id_lines(self) -> None:
        tp = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        self.assertEqual(parse_id_line(b"42 7 " + tp), (42, 7))
        self.assertEqual(trace_of(b"42 7 " + tp), tp.decode())
        self.assertEqual(trace_of(b"42 7"), None)
        for bad in (tp, b"1 -1", b"1 2 3 " + tp):
            with self.subTest(line=bad), self.assertRaises(ValueError):
                parse_id_line(bad)

    def test_status_lines(self) -> None:
        self.assertEqual(status_line(0), b"0\n")
        self.assertEqual(status_line(1, "bad\n  thing"), b"1 # bad thing\n")
        self.assertEqual(status_line(0, "", [("geo", 0.5)]), b"0 geo=0.500000\n")

    def test_reader(self) -> None:
        r, w = os.pipe()
        os.write(w, b"1 10\n2\n3")
        reader = LineReader(r)
        self.assertEqual(reader.readline(), b"1 10")
        self.assertEqual(reader.peek(), (2, None))
        self.assertEqual(reader.readline(), b"2")
        self.assertIsNone(reader.peek())  # "3" has no newline yet
        os.close(w)
        self.assertEqual(reader.readline(), b"3")  # a last line without a newline counts
        self.assertIsNone(reader.readline())
        os.close(r)


class TestMoves(unittest.TestCase):
    def test_checks(self) -> None:
        m = Message(1, None, "here")
        big = Finish(result=bytes(MAX_RESULT + 1))
        for bad in (Advance("here"), Advance("no spaces"), Pause(-1), Pause(float("nan")), None, "done", Join("no spaces"), big):
            with self.subTest(move=bad), self.assertRaises(PassError):
                check_move(bad, m)
        with self.assertRaisesRegex(PassError, "^cannot finish with a result of 65537 bytes: at most 65536 \\(64 KiB\\)$"):
            check_move(big, m)
        for good in (Advance("there"), Finish(), Pause(0), Fail("why"), Join("here"), Finish(result=bytes(MAX_RESULT))):
            self.assertIs(check_move(good, m), good)

    def test_token(self) -> None:
        self.assertEqual(move_statement(Finish(), Message(1, 9, "s"))[1], (1, 9))
        self.assertEqual(move_statement(Advance("t"), Message(1, None, "s"))[1], (1, "t", None))
        self.assertEqual(move_statement(Join("j"), Message(1, 9, "s"))[1], (1, "j", 9))
        self.assertEqual(move_statement(Finish(result=b"r"), Message(1, None, "s"))[1], (1, None, b"r"))

    def test_queued_spawn(self) -> None:
        m = Message(1, 9, "s")
        self.assertIsNone(m.spawn_many(None, "c", [b"a", b"b"], headers={"k": "v"}))
        self.assertIsNone(m.spawn(None, "c", b"x", key="k1", priority=-1))
        self.assertEqual([p for _, p in m.queued], [(1, "c", [b"a", b"b"], '{"k": "v"}', 0, 9), (1, "c", b"x", None, -1, "k1", 9)])


class TestConfig(unittest.TestCase):
    def test_dsn(self) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
            f.write("# x\n[pepsi-dispatch]\nDSN = no\n[database]\nDSN = host=/tmp pass=a;b   ; comment\n")
            f.flush()
            self.assertEqual(ini_dsn(f.name), "host=/tmp pass=a;b")

    def test_arg(self) -> None:
        self.assertEqual(config_arg(["--next", "x", "-c", "/etc/p.conf"]), "/etc/p.conf")
        self.assertEqual(config_arg(["--next", "x"]), "")


if __name__ == "__main__":
    unittest.main()
