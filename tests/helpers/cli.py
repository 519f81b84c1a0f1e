"""The CLI with a bad input: exit code 2 and one line on stderr."""

from __future__ import annotations

from teamrl.cli import main


def one_line_error(capsys, *argv: str) -> str:
    """Run the CLI, expect exit code 2, and return its single stderr line."""
    capsys.readouterr()
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("teamrl: error: "), err
    assert "Traceback" not in err
    return lines[0]
