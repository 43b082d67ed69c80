"""The documentation site: built with MkDocs ``--strict`` (a broken link or a page missing
from the navigation fails), its generated reference pages hold what the code defines, and a
real browser (headless Chromium) renders its pages: not blank, the navigation there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streamscale import processes
from streamscale.settings import Settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
PAGES = [
    "index.html",
    "how-to/attach/index.html",
    "reference/metrics/index.html",
]
"""A page of each kind: the home page, a written guide, a reference page made from the code."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_reference_pages_are_built_from_the_code(site: Path) -> None:
    settings = (site / "reference/settings/index.html").read_text()
    for name in Settings.model_fields:
        assert f"STREAMSCALE_{name.upper()}" in settings, name
    cli = (site / "reference/cli/index.html").read_text()
    assert "streamscale attach" in cli and "--max-executors" in cli
    metrics = (site / "reference/metrics/index.html").read_text()
    assert "kafka_consumergroup_group_lag" in metrics and "streamscale_time_lag_seconds" in metrics


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is missing: make setup installs it (Debian package chromium)"
    return found


def browse(args: list[str], out: Path, timeout_s: float = 120.0) -> str:
    """Run headless Chromium in a process group of its own, stopped by PID whatever
    happens; its standard output."""
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={out / 'profile'}",
        *args,
    ]
    with open(out / "chromium.out", "w") as stdout, open(out / "chromium.err", "w") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        proc.wait(timeout=timeout_s)
    finally:
        processes.stop_group(proc.pid, 5)
    return (out / "chromium.out").read_text()


@pytest.mark.parametrize("page", PAGES)
def test_a_browser_renders_the_page_with_its_navigation(
    site: Path, page: str, tmp_path: Path
) -> None:
    from PIL import Image, ImageStat

    url = (site / page).as_uri()
    shot = tmp_path / "page.png"
    browse(["--window-size=1280,900", f"--screenshot={shot}", url], tmp_path)
    assert shot.exists() and shot.stat().st_size > 0, (tmp_path / "chromium.err").read_text()
    with Image.open(shot) as image:
        gray = image.convert("L")
        colors = len(set(gray.getdata()))
        spread = ImageStat.Stat(gray).stddev[0]
    assert colors > 16 and spread > 10, f"{page}: blank? {colors} shades, spread {spread:.1f}"
    dom = browse(["--dump-dom", url], tmp_path)
    assert 'class="md-nav' in dom and "Attach to your job" in dom, f"{page}: no navigation"
    assert "md-content" in dom
    kept = ROOT / "build" / "site-screenshots"
    kept.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, kept / (page.replace("/", "_").removesuffix(".html") + ".png"))
