"""The workbook as a user sees it: JupyterLab and the HTML report in headless Chromium.

A real JupyterLab server on loopback serves copies of the committed notebooks; Chromium (the
Debian ``chromium`` and ``chromium-driver`` packages, driven by selenium) opens them, runs them
and clicks the ServerPanel's buttons. A run folder's ``report.html`` is opened from disk, on a
desktop-sized and a phone-sized window. Screenshots go to the test's output folder (``tmp_path``,
or ``$GLM5_TEST_OUTPUT/browser`` when set). Any error output, JavaScript console error, broken
image or widget error fails the test. Skipped, with the reason, where Chromium or selenium is
missing.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from glm5lib.server import find_free_port as free_port

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
TOKEN = "glm5-browser-test"
PANEL = "06-explore-interactively.ipynb"

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,1100",
)
# What ipywidgets shows where a widget cannot render.
WIDGET_ERRORS = ("Error displaying widget", "Failed to load model class", "Failed to create view",
                 "Loading widget...")


def _chromium() -> tuple[str, str]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or next(
        (p for p in ("/usr/lib/chromium/chromedriver", "/usr/bin/chromedriver") if Path(p).exists()), None)
    if not binary or not driver:
        pytest.skip("Chromium or chromedriver is not installed (Debian: apt-get install chromium "
                    "chromium-driver; .ci/run installs them where it can)")
    return binary, driver


def _wait(condition, what: str, timeout: float = 120.0, every: float = 0.25):
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    base = os.environ.get("GLM5_TEST_OUTPUT")
    folder = Path(base) / "browser" if base else tmp_path_factory.mktemp("browser-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over copies of the notebooks; the panel's copy waits for the buttons."""
    _chromium()
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")
    root = tmp_path_factory.mktemp("lab")
    for path in NOTEBOOKS:
        shutil.copy(path, root / path.name)
    panel = nbformat.read(root / PANEL, as_version=4)
    params = next(c for c in panel.cells if "parameters" in c.metadata.get("tags", []))
    params.source = "\n".join(
        {"SCRIPTED_SWEEP": "SCRIPTED_SWEEP = False", "PANEL_LEVELS": "PANEL_LEVELS = [1, 4]",
         "PANEL_LEVEL_S": "PANEL_LEVEL_S = 1.5", "PANEL_OUTPUT_LEN": "PANEL_OUTPUT_LEN = 16"}.get(
            line.split(" = ")[0], line)
        for line in params.source.splitlines())
    nbformat.write(panel, root / "panel-by-hand.ipynb")
    port = free_port()
    # No "official Jupyter news?" prompt over the page.
    news = root / ".settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))
    env = {**os.environ, "GLM5_RUNS_DIR": str(root / "runs"), "JUPYTER_CONFIG_DIR": str(root / ".config"),
           "JUPYTERLAB_SETTINGS_DIR": str(root / ".settings"), "JUPYTERLAB_WORKSPACES_DIR": str(root / ".workspaces"),
           "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    log = (root / "lab.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly", "--LabApp.expose_app_in_browser=True"],
        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with {proc.returncode}: {(root / 'lab.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    try:
        _wait(up, "JupyterLab to answer", timeout=120)
        yield base, root
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _driver(profile: Path):
    """A headless Chromium with its console log kept (skips where it cannot start)."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")
    from selenium import webdriver
    from selenium.common.exceptions import SessionNotCreatedException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary, driver = _chromium()
    options = Options()
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(options=options, service=Service(driver))
    except SessionNotCreatedException as exc:
        pytest.skip(f"Chromium is installed but does not start here: {exc.msg}")


@pytest.fixture(scope="module")
def browser(lab):
    base, root = lab
    drv = _driver(root / ".chromium")
    try:
        drv.get(f"{base}/lab?token={TOKEN}")
        _wait(lambda: drv.execute_script("return !!(window.jupyterapp && window.jupyterapp.started)"),
              "JupyterLab's page to load")
        drv.execute_script("window.jupyterapp.restored.then(() => { window.__restored = true; })")
        _wait(lambda: drv.execute_script("return window.__restored === true"), "JupyterLab to restore")
        yield drv
    finally:
        drv.quit()


# -- page helpers ------------------------------------------------------------------------------
#: JupyterLab's own debugger, asking a kernel that a previous notebook's close is shutting down for its
#: state, logs this race as SEVERE ("Canceled future for debug_request message before replies were
#: done"); it says nothing of the page under test, so it is the one message not counted
_JUPYTERLAB_DEBUGGER_RACE = "Could not restore the debugger state"


def _console_errors(drv) -> list[str]:
    return [e["message"] for e in drv.get_log("browser")
            if e.get("level") == "SEVERE" and _JUPYTERLAB_DEBUGGER_RACE not in e["message"]]


def _open(drv, name: str) -> None:
    drv.execute_script(
        "window.__nb = null; window.jupyterapp.commands.execute('docmanager:open', {path: arguments[0]})"
        ".then(w => w.context.ready.then(() => w.sessionContext.ready).then(() => { window.__nb = w; }));", name)
    _wait(lambda: drv.execute_script("return !!window.__nb"), f"{name} to open")
    _wait(lambda: drv.execute_script(
        "const k = window.__nb.sessionContext.session && window.__nb.sessionContext.session.kernel;"
        "return !!k && k.status === 'idle';"), f"the kernel of {name} to be idle")


def _close(drv) -> None:
    drv.execute_script(
        "const w = window.__nb; w.context.model.dirty = false;"
        "w.sessionContext.shutdown().then(() => w.dispose());")


def _run_all(drv, name: str, timeout: float = 240.0) -> None:
    drv.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    _wait(lambda: drv.execute_script(
        "const w = window.__nb; const k = w.sessionContext.session.kernel;"
        "const cells = Array.from(w.content.model.cells);"
        "return k.status === 'idle' && cells.every(c => c.type !== 'code' || c.executionCount !== null);"),
        f"every cell of {name} to run", timeout=timeout)


def _errors(drv) -> list[str]:
    """Error outputs of the open notebook and widget errors on the page."""
    outputs = drv.execute_script(
        "return Array.from(window.__nb.content.model.cells).filter(c => c.type === 'code')"
        ".flatMap(c => c.outputs.toJSON()).filter(o => o.output_type === 'error')"
        ".map(o => o.ename + ': ' + o.evalue);")
    text = drv.execute_script("return document.body.innerText")
    return outputs + [w for w in WIDGET_ERRORS if w in text]


def _button(drv, label: str):
    from selenium.webdriver.common.by import By

    found = [b for b in drv.find_elements(By.CSS_SELECTOR, "button.widget-button") if b.text.strip() == label]
    assert len(found) == 1, f"{len(found)} buttons labelled {label!r}"
    return found[0]


def _status(drv) -> str:
    return drv.execute_script(
        "const e = document.querySelector('.glm5-panel-status .widget-html-content');"
        "return e ? e.innerText : '';")


def _states(drv) -> dict[str, bool]:
    """Which of the panel's buttons are disabled."""
    return {label: not _button(drv, label).is_enabled() for label in ("Launch", "Sweep", "Stop", "Stop server")}


def _rect(drv, selector: str) -> dict:
    return drv.execute_script(
        "const e = document.querySelector(arguments[0]); if (!e) return null;"
        "const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,"
        " width: r.width, height: r.height};", selector)


# -- tests -------------------------------------------------------------------------------------
def test_opening_a_notebook_and_saving_it_changes_nothing(lab, browser, shots):
    _, root = lab
    for path in NOTEBOOKS:
        before = (root / path.name).read_bytes()
        _open(browser, path.name)
        dirty = browser.execute_script("return window.__nb.context.model.dirty")
        browser.execute_script("window.__saved = false; window.__nb.context.save().then(() => { window.__saved = true; })")
        _wait(lambda: browser.execute_script("return window.__saved"), f"{path.name} to save")
        after = (root / path.name).read_bytes()
        browser.save_screenshot(str(shots / f"open-{path.stem}.png"))
        _close(browser)
        committed = json.loads(before)["metadata"]["language_info"].get("version")
        if committed != platform.python_version():
            # The one line JupyterLab rewrites on another Python than the committed notebooks'.
            before = before.replace(f'"version": "{committed}"'.encode(),
                                    f'"version": "{platform.python_version()}"'.encode())
        else:
            assert not dirty, f"JupyterLab marked {path.name} modified on opening it"
        assert after == before, f"saving {path.name} unchanged rewrote it: {json.loads(after)['metadata']}"
    assert not _console_errors(browser)


def test_notebook_01_runs_all_cells_without_an_error(lab, browser, shots):
    name = "01-check-environment.ipynb"
    _open(browser, name)
    _run_all(browser, name)
    browser.save_screenshot(str(shots / "01-run-all.png"))
    browser.execute_script(
        "const t = Array.from(document.querySelectorAll('.jp-OutputArea-output table'))"
        ".find(e => e.innerText.includes('power limit (W)')); if (t) t.scrollIntoView();")
    browser.save_screenshot(str(shots / "01-gpus.png"))
    text = browser.execute_script("return window.__nb.node.innerText")
    errors = _errors(browser)
    _close(browser)
    assert not errors
    assert "GPU0" in text and "power limit (W)" in text and "PCIe width" in text
    assert not _console_errors(browser)


def _bar_text(drv) -> str:
    return drv.execute_script(
        "const e = document.querySelector('.glm5-panel-bar');"
        "return e ? e.innerText.replace(/\\u2007/g, ' ') : '';")  # tqdm writes spaces as figure spaces


def _panel_scroll(drv) -> float:
    return drv.execute_script(
        "const e = document.querySelector('.glm5-panel'); let p = e && e.parentElement;"
        "while (p && p.scrollHeight <= p.clientHeight) p = p.parentElement; return p ? p.scrollTop : 0;")


def test_the_panel_launches_sweeps_twice_and_stops_a_sweep_by_its_buttons(lab, browser, shots):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    name = "panel-by-hand.ipynb"
    _open(browser, name)
    try:
        _run_all(browser, name)
        assert "No sweep yet" in browser.execute_script("return window.__nb.node.innerText")
        assert _states(browser) == {"Launch": False, "Sweep": True, "Stop": True, "Stop server": True}
        browser.save_screenshot(str(shots / "panel-0-before-launch.png"))

        _button(browser, "Launch").click()
        _wait(lambda: "server ready at http://127.0.0.1:" in _status(browser), "the server to be ready")
        idle = {"Launch": True, "Sweep": False, "Stop": True, "Stop server": False}
        _wait(lambda: _states(browser) == idle, "Sweep and Stop server to be enabled")
        for attempt in (1, 2):
            if attempt == 2:
                before = (_rect(browser, ".glm5-panel"), _rect(browser, ".glm5-panel-plot"), _panel_scroll(browser))
            _button(browser, "Sweep").click()
            # the kernel handles the click a moment later: until then the page still shows the
            # last sweep's "sweep done" and enabled buttons, which must not pass for this one's
            _wait(lambda: _status(browser).startswith("sweeping levels"), f"sweep {attempt} to start")
            if attempt == 2:
                # sweeping again keeps the earlier sweep drawn: the plot is not blanked, the page does not jump
                assert browser.find_element(By.CSS_SELECTOR, ".glm5-panel-plot").is_displayed()
                after = (_rect(browser, ".glm5-panel"), _rect(browser, ".glm5-panel-plot"), _panel_scroll(browser))
                assert abs(after[1]["top"] - before[1]["top"]) < 2, "the plot moved when the sweep started"
                # (the status line's length may change by a line; nothing like a blanked plot's height)
                assert abs(after[0]["height"] - before[0]["height"]) < 30, (before, after)
                assert after[2] == before[2], "the page scrolled when the sweep started"
            _wait(lambda: "sweep done: 2 levels" in _status(browser), f"sweep {attempt} to finish")
            _wait(lambda: _states(browser) == idle, f"Sweep to be enabled again after sweep {attempt}")
            _wait(lambda: "sweep done (2 levels)" in _bar_text(browser), "the bar to say the sweep is done")
            assert "tok_s" not in _bar_text(browser), "the bar keeps the last level's numbers after the sweep"
            browser.save_screenshot(str(shots / f"panel-{attempt}-sweep-done.png"))
            # the plot: an SVG drawn to its box's width, beside the controls, the whole panel in the window
            plot, controls = _rect(browser, ".glm5-panel-plot"), _rect(browser, ".glm5-panel-controls")
            assert plot["left"] >= controls["right"] - 1 and plot["top"] < controls["bottom"], (plot, controls)
            box = _rect(browser, ".glm5-panel-figure")
            assert abs(plot["width"] - box["width"]) < 2 and plot["height"] > 100
            assert _rect(browser, ".glm5-panel")["height"] < browser.execute_script("return window.innerHeight")
            assert browser.execute_script(
                "const i = document.querySelector('.glm5-panel-plot'); return i.complete && i.naturalWidth > 0")

        # A long third sweep, typed into the page, stopped while its first level runs: the server stays.
        field = browser.find_element(
            By.XPATH, "//div[contains(@class, 'widget-inline-hbox')][.//label[normalize-space()='level s']]//input")
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys("60", Keys.ENTER)
        _button(browser, "Sweep").click()
        _wait(lambda: _status(browser).startswith("sweeping levels"), "the third sweep to start")
        _wait(lambda: _states(browser) == {"Launch": True, "Sweep": True, "Stop": False, "Stop server": False},
              "Stop to be enabled while the sweep runs")
        _wait(lambda: "C=1" in _bar_text(browser) and "tok_s" in _bar_text(browser), "the running level's numbers")
        _button(browser, "Stop").click()
        _wait(lambda: "sweep stopped by the user" in _status(browser), "the stop to be reported")
        assert _status(browser) == ("sweep stopped by the user during level 1 (no level finished); "
                                    "the server keeps running")
        _wait(lambda: _states(browser) == idle, "Sweep and Stop server to be enabled after Stop")
        assert "tok_s" not in _bar_text(browser) and "stopped by the user" in _bar_text(browser)
        browser.save_screenshot(str(shots / "panel-3-sweep-stopped.png"))
        assert browser.find_element(By.CSS_SELECTOR, ".glm5-panel-plot").is_displayed()
        assert "(live)" not in browser.execute_script("return window.__nb.node.innerText")

        _button(browser, "Stop server").click()
        _wait(lambda: _status(browser) == "server stopped", "the server to stop")
        _wait(lambda: _states(browser) == {"Launch": False, "Sweep": True, "Stop": True, "Stop server": True},
              "only Launch to be enabled after Stop server")
        assert "no server" in _bar_text(browser)
        browser.save_screenshot(str(shots / "panel-4-server-stopped.png"))
        assert not _errors(browser)
    finally:
        _close(browser)
    assert not _console_errors(browser)


@pytest.fixture(scope="module")
def report_run(tmp_path_factory) -> Path:
    """A copy of a shipped run folder with its report written by this glm5lib."""
    from glm5lib.report import write_report

    run = shutil.copytree(ROOT / "data" / "examples" / "cpu-vllm", tmp_path_factory.mktemp("report") / "cpu-vllm",
                          ignore=shutil.ignore_patterns("report.*", "summary.json"))
    write_report(run)
    return run


def test_the_html_report_opens_offline_with_every_figure_and_sorts_its_tables(report_run, shots, tmp_path):
    from selenium.webdriver.common.by import By

    page = report_run / "report.html"
    alone = tmp_path / "alone" / "report.html"  # no figures folder beside it: everything must be inside
    alone.parent.mkdir()
    shutil.copy(page, alone)
    figures = json.loads((report_run / "summary.json").read_text())["figures"]
    drv = _driver(tmp_path / ".chromium")
    try:
        for width, height, label in ((1280, 1000, "desktop"), (390, 844, "phone")):
            drv.set_window_size(width, height)
            drv.get(alone.as_uri())
            _wait(lambda: drv.execute_script("return document.readyState") == "complete", "the report to load")
            images = drv.execute_script(
                "return Array.from(document.images).map(i => ({src: i.src.slice(0, 22), ok: i.complete && "
                "i.naturalWidth > 0, width: i.getBoundingClientRect().width}))")
            assert len(images) == len(figures) >= 3
            assert all(i["ok"] and i["src"].startswith("data:image/png") for i in images), images
            # nothing fetched from anywhere: the page and its data URIs only
            fetched = drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
            assert all(name.startswith("data:") for name in fetched), fetched
            # fits the window: no page-wide sideways scroll, figures within the width
            inner = drv.execute_script("return document.documentElement.clientWidth")
            assert drv.execute_script("return document.documentElement.scrollWidth") <= inner + 1
            assert all(i["width"] <= inner for i in images)
            drv.save_screenshot(str(shots / f"report-{label}.png"))
            assert "These measurements come from" not in drv.find_element(By.TAG_NAME, "body").text
            assert "Measured on a real server" in drv.find_element(By.TAG_NAME, "body").text
        # the whole page in one picture, for a reviewer
        drv.set_window_size(1280, min(8000, drv.execute_script("return document.documentElement.scrollHeight") + 40))
        drv.save_screenshot(str(shots / "report-whole.png"))
        drv.set_window_size(1280, 1000)
        # sortable: a click on "output tok/s" orders the phase's rows by it, a second click reverses them
        table = drv.find_elements(By.CSS_SELECTOR, "table")[0]
        header = next(th for th in table.find_elements(By.CSS_SELECTOR, "th") if th.text.startswith("output tok/s"))
        col = [th.text for th in table.find_elements(By.CSS_SELECTOR, "th")].index(header.text)

        def column() -> list[float]:
            return [float(r.find_elements(By.CSS_SELECTOR, "td")[col].text.replace(",", ""))
                    for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]

        drv.execute_script("arguments[0].click()", header)
        assert column() == sorted(column()) and header.get_attribute("aria-sort") == "ascending"
        drv.execute_script("arguments[0].click()", header)
        assert column() == sorted(column(), reverse=True)
        assert not _console_errors(drv)

        # a run on the stand-in opens with the banner, drawn as one
        standin = tmp_path / "standin"
        folder = standin / "baseline"
        folder.mkdir(parents=True)
        (folder / "sweep.csv").write_text("concurrency,completed,failed,output_throughput\n1,10,0,40\n256,80,0,880\n")
        (folder / "server_info.json").write_text(json.dumps({"standin": {"profile": "glm5-nvfp4-8x-rtxpro6000"}}))
        from glm5lib.report import write_report

        write_report(standin)
        drv.get((standin / "report.html").as_uri())
        banner = drv.find_element(By.CSS_SELECTOR, "blockquote.banner")
        assert banner.is_displayed() and "stand-in server, not from SGLang on GPUs" in banner.text
        assert banner.value_of_css_property("background-color") != "rgba(0, 0, 0, 0)"
        drv.save_screenshot(str(shots / "report-standin.png"))
        assert not _console_errors(drv)
    finally:
        drv.quit()
