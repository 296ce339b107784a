"""Progress output: a redrawn bar with rate and ETA on a terminal, plain lines in a pipe or a file."""
from __future__ import annotations

import io

from rpl_sql.display.progress import Progress, bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_has_rate_and_eta():
    assert bar(50, 200, 25.0, "events", width=8) == "[##------]  25%  50/200 events  25 events/s  ETA 0:00:06"
    assert bar(200, 200, 25.0, "events", width=4).startswith("[####] 100%")
    assert bar(7, None, 3.5, "events") == "7 events  4 events/s"  # no known total: counts and rate


def test_terminal_redraws_one_line_and_a_pipe_gets_lines():
    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        p = Progress(stream)
        p.show("[apply 'c']", "a longer first report")
        p.show("[apply 'c']", "short")
        p.close()
    assert tty.getvalue() == "\r[apply 'c'] a longer first report\r[apply 'c'] short" + " " * 16 + "\n"
    assert pipe.getvalue() == "[apply 'c'] a longer first report\n[apply 'c'] short\n"
