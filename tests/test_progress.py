"""aioloader._progress: drawn on a terminal, silent elsewhere."""

from __future__ import annotations

import io

from aioloader._progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    bar = Progress(4, "batches", stream=stream)
    for _ in range(4):
        bar.advance()
    assert bar.done == 4
    assert stream.getvalue() == ""


def test_draws_and_ends_the_line_on_a_terminal() -> None:
    stream = FakeTerminal()
    bar = Progress(2, "steps", stream=stream)
    bar.advance()
    bar.advance()
    text = stream.getvalue()
    assert text.startswith("\r[###############...............] 1/2 steps")
    assert "\r[##############################] 2/2 steps" in text
    assert text.endswith("\n")
