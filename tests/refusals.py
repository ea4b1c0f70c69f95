"""What every refusal looks like to a CLI test: one ``error:`` line naming the field, exit 2."""

from __future__ import annotations


def one_error(result, *needles: str) -> str:
    """The one ``error:`` line a refused command printed (exit 2), holding every needle."""
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output[-800:], result.exception)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output[-800:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
