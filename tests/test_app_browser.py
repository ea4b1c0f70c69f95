"""One real browser against `streamlit run app.py`: the page loads, the headline chart renders,
and editing a widget redraws it (Playwright driving Debian's Chromium, headless)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real browser against a served page

pytest.importorskip("playwright.sync_api")
ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "screenshot_app", ROOT / "docs" / "screenshot_app.py"
)
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)


@pytest.mark.skipif(not Path(helpers.CHROMIUM).exists(), reason="Chromium is not installed")
def test_page_loads_renders_the_headline_chart_and_redraws_on_a_widget_change(tmp_path):
    shot = tmp_path / "app.png"
    with helpers.serve() as url:
        before, after = helpers.drive(url, shot)
    assert before == 16  # the CLI's two default methods at its 8 default concurrencies
    assert after == 4  # the loads edited to "1,16"
    assert shot.stat().st_size > 20_000
