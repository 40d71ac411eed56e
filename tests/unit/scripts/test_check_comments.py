"""scripts/check_comments.py: comments and docstrings with a date, a time of day or a time zone are
found with their line; code, string literals, slices, ratios and addresses are not."""

from __future__ import annotations

import pytest

from tests.support.scripts import load_script

pytestmark = pytest.mark.unit

check = load_script("check_comments")

DATED = '''"""Loads in fifo order.

Measured 2 Dec 14:42 GMT: 10.0 s.
"""

import datetime

ZONE = datetime.UTC  # a time zone in code
STAMP = "2026-12-02T14:42"  # a literal is code, not prose


class Lanes:
    """One lane per NIC."""

    def take(self) -> None:
        """Takes the lane (run of 2026-12-02)."""
        ids = [0] * 64
        return ids[10:20]  # slice ids[10:20], ratio 1:4, address 127.0.0.1:50051


# the default since Dec 2, the 08:20 run
'''


def test_dated_lines_are_found_with_their_line_and_kinds():
    assert check.findings(DATED) == [
        check.Finding(3, ("time zone", "time of day", "day and month"), "Measured 2 Dec 14:42 GMT: 10.0 s."),
        check.Finding(16, ("ISO date",), "Takes the lane (run of 2026-12-02)."),
        check.Finding(21, ("time of day", "day and month"), "# the default since Dec 2, the 08:20 run"),
    ]


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("# a ratio of 1:4 and 16:1", []),
        ("# tokens ids[12:24] of the prompt", []),
        ("# listens on 127.0.0.1:50051 or localhost:8080", []),
        ("# a 12 months window, 3 may be taken", []),
        ("# 2 December", ["day and month"]),
        ("# 10:30", ["time of day"]),
        ("# GMT", ["time zone"]),
        # spelt in two parts so that a grep for the zone over the tree finds only real uses
        ("# " + "U" + "TC", ["time zone"]),
    ],
)
def test_each_kind_of_date_and_nothing_else_is_matched(text, kinds):
    assert check.matches(text) == kinds


def test_main_prints_each_dated_line_and_fails(tmp_path, capsys):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "dated.py").write_text(DATED)
    (package / "clean.py").write_text('"""Takes the oldest turn first so its KV arrives at the full rate."""\n')
    (package / "notes.txt").write_text("2 Dec 14:42 GMT\n")

    assert check.main([str(package)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{package}/dated.py:3: [time zone, time of day, day and month] Measured 2 Dec 14:42 GMT: 10.0 s.",
        f"{package}/dated.py:16: [ISO date] Takes the lane (run of 2026-12-02).",
        f"{package}/dated.py:21: [time of day, day and month] # the default since Dec 2, the 08:20 run",
        "3 dated comment or docstring line(s): state the mechanism; dates and runs go in docs/",
    ]


def test_main_passes_clean_files_and_asks_for_a_path(tmp_path, capsys):
    clean = tmp_path / "clean.py"
    clean.write_text("# the lane is free once its holder leaves\nx = 1\n")

    assert check.main([str(clean)]) == 0
    assert capsys.readouterr().out == ""
    assert check.main([]) == 2
    assert capsys.readouterr().err == "usage: check_comments.py PATH...\n"
