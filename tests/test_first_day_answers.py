"""What a first-day user reads as the answer: plan's answer first and within 80 columns, the
model list readable there too, a fleet's headroom beside its busy share, every interval inside
its quantity's range, and one unit for the validation error wherever it is shown."""

from __future__ import annotations

import re

import pandas as pd
import pytest

# --- validation: errors in percent everywhere a person reads them -----------------------------


def _predictions() -> pd.DataFrame:
    """Three validation rows: two predicted (errors -3 % and +5 %), one skipped."""
    return pd.DataFrame(
        {
            "series": ["a", "a", "b"],
            "case_id": ["c0", "c1", "c2"],
            "metric": ["speedup"] * 3,
            "method": ["eagle3"] * 3,
            "k": [3] * 3,
            "load": [1, 2, 4],
            "measured_value": [1.5, 1.6, 2.0],
            "predicted_value": [1.455, 1.68, float("nan")],
            "rel_error": [-0.03, 0.05, float("nan")],
            "status": ["ok", "ok", "skipped"],
        }
    )


def test_the_validation_report_shows_mape_in_percent_as_the_cli_prints_it(tmp_path):
    from simspec.cli.validate import shown_table
    from simspec.studies.validation.report import write_report
    from simspec.studies.validation.summary import series_table

    pred = _predictions()
    table = series_table(pred)
    page = tmp_path / "validation.html"
    write_report(pred, table, page)
    text = page.read_text(encoding="utf-8")
    cli = shown_table(table)
    assert cli.loc[cli["series"] == "ALL", "MAPE %"].item() == pytest.approx(4.0)
    assert "<th>MAPE %</th>" in text and "<th>mape</th>" not in text
    all_row = re.search(r"<td>ALL</td>(.*?)</tr>", text, re.S)
    assert all_row is not None
    cells = re.findall(r"<td>([^<]*)</td>", all_row.group(1))
    assert cells[3:6] == ["4.0", "5.0", "1.0"]  # MAPE, max |err| and bias, in percent
    assert "MAPE 4.0% (4.0% counting each measurement once)" in text
