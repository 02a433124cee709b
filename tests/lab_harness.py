"""A real JupyterLab on loopback, driven by headless Chromium through Selenium (Debian's chromedriver).

Used by tests/test_jupyterlab.py to open notebooks as a user does: `jupyter lab` from the
project's venv (no token, a temporary root and config, `--allow-root` where CI runs as root),
a 1,280 x 800 window, Run All, then clicks and typing as real input events.

`tiny_map_run` makes the small run those notebooks build their pane on: frozen-mode heads
with fresh weights (what stages 02-03 leave on a CPU; training is not under test here) and
the retrieval decoder of stage 04 over ACLSum's human statements, with its confidence
calibration, so a tap decodes real text.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

ASPECTS = ["challenge", "approach"]
CORPUS = "aclsum:validation[:30]"
# The tests marked `timed` hold a wall-clock bar, asserted only where WORKBENCH_TIMED=1 (`make test-timed`, alone on
# a quiet machine): beside another worker's pipeline the browser measures that load, not the pane. `make test` runs
# their gestures and every other check with the rest of the suite.
TIMED = os.environ.get("WORKBENCH_TIMED") == "1"
WIDTH, HEIGHT = 1280, 800


# --------------------------------------------------------------------------- the run


def tiny_map_run(run: Path) -> Path:
    """Stages 02-04's artifacts for 30 ACLSum papers: untrained frozen heads and a retrieval decoder."""
    from workbench.data.corpus import load_corpus
    from workbench.decode.decoding import build_retrieval_decoders, calibrate_confidence, set_default_decoder
    from workbench.embed.distill import DistillConfig
    from workbench.embed.heads import PooledAspectModel
    from workbench.core.rundir import RunDir
    from workbench.embed.aspect_training import TrainConfig

    corpus = load_corpus(CORPUS)
    ids = corpus.ids
    models = RunDir(run).aspect_models
    for i, aspect in enumerate(ASPECTS):
        PooledAspectModel("minilm", [aspect], hidden=384, pool=False, rank=TrainConfig().head_rank,
                          seed=i).save_pretrained(models / aspect, extra={"aspect": aspect, "mode": "frozen"})
    RunDir(run).write_split(ids[:20], ids[20:])
    PooledAspectModel("minilm", ASPECTS, hidden=384, pool=True, rank=DistillConfig().head_rank).save_pretrained(
        RunDir(run).unified_model, extra={"stage": "distill", "mode": "frozen"})
    build_retrieval_decoders(run, corpus, ASPECTS)
    set_default_decoder(run, "retrieval")
    # The confidence levels of stage 04, from round trips of the validation papers' own statements.
    calibrate_confidence(run, corpus, ASPECTS, doc_ids=ids[20:])
    # Stage 03's verdict as a run whose trained heads the guard replaced says it: nothing checked them.
    RunDir(run).guard.write_text(json.dumps({"aspects": {a: {"verified": False, "kept": "aspect file"}
                                                         for a in ASPECTS}}))
    return run


# --------------------------------------------------------------------------- JupyterLab


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """`jupyter lab` on 127.0.0.1 with no token, serving `root` to JupyterLab and to Jupyter Notebook 7 (its server
    extension, enabled where the notebook package is installed); its config, data and runtime kept apart."""

    def __init__(self, root: Path, home: Path):
        self.root, self.home, self.port = Path(root), Path(home), _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def notebook_url(self, name: str, app: str = "lab") -> str:
        """Where a notebook of the root opens in `app`, "lab" or "notebook": in Lab alone in a workspace of its own
        (`?reset`), so no other notebook's pane loads BokehJS beside it; in Notebook 7 on a page of its own anyway."""
        if app not in {"lab", "notebook"}:
            raise ValueError(f"app must be lab or notebook, not {app!r}")
        if app == "notebook":
            return f"{self.url}/notebooks/{name}"
        return f"{self.url}/lab/workspaces/{Path(name).stem.replace('_', '-')}/tree/{name}?reset"

    def __enter__(self):
        env = dict(os.environ)
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
                     "JUPYTERLAB_WORKSPACES_DIR", "IPYTHONDIR"):
            path = self.home / name.lower()
            path.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
        # No "get notified about Jupyter news?" toast over the notebook (it would cover the pane).
        news = self.home / "jupyterlab_settings_dir" / "@jupyterlab" / "apputils-extension"
        news.mkdir(parents=True, exist_ok=True)
        (news / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
        # The kernel imports the workbench from this checkout (the venv has it installed in editable mode).
        # --expose-app-in-browser: window.jupyterapp, to run commands (Run All, save) as the menus do; in Lab's
        # pages, and in Notebook 7's (JupyterNotebookApp's own setting).
        cmd = [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", f"--port={self.port}",
               "--ip=127.0.0.1", f"--ServerApp.root_dir={self.root}", "--IdentityProvider.token=",
               "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True", "--expose-app-in-browser",
               "--JupyterNotebookApp.expose_app_in_browser=True",
               "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log = open(self.home / "jupyter.log", "w")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + 90
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {self.logs()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"jupyter lab did not answer in 90 s: {self.logs()[-2000:]}")

    def logs(self) -> str:
        return (self.home / "jupyter.log").read_text(errors="replace")

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the server and the kernels it started
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def notebook(path: Path, cells: list[str]) -> Path:
    """Write a notebook of code cells (python3 kernel), as a user would have saved it."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, str(path))
    return path


# --------------------------------------------------------------------------- the browser


def chromium_paths() -> tuple[str, str] | None:
    """(browser, driver) of Debian's chromium and chromium-driver, or None."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
    return (browser, driver) if browser and driver else None


# Finds the Bokeh plot view of the map (the figure whose data source is named "points") in the page.
_PLOT_JS = """
const plots = [];
if (typeof Bokeh === 'undefined') { return null; }
const roots = Bokeh.index.roots !== undefined ? [...Bokeh.index.roots] : Object.values(Bokeh.index);
for (const root of roots) {
  const stack = [root];
  while (stack.length) {
    const v = stack.pop();
    if (v.frame !== undefined && v.model.renderers !== undefined) { plots.push(v); }
    if (v.child_views !== undefined) { for (const c of v.child_views) { stack.push(c); } }
  }
}
return plots;
"""


class Browser:
    """Headless Chromium at 1,280 x 800 with console logging, and the gestures the tests need."""

    def __init__(self, profile: Path):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        browser, driver = chromium_paths()
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        # --enable-unsafe-swiftshader: WebGL in software, as the map's points are drawn (Chromium's
        # automatic fallback to it is deprecated)
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader",
                    "--disable-dev-shm-usage",
                    f"--window-size={WIDTH},{HEIGHT}", f"--user-data-dir={profile}", "--disable-extensions"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(driver), options=options)
        self.driver.set_window_size(WIDTH, HEIGHT)
        self.console: list[dict] = []

    def close(self):
        self.driver.quit()

    # -- JupyterLab

    def open(self, url: str, timeout: float = 90):
        self.driver.get(url)
        self.wait(lambda: self.js("return !!(window.jupyterapp && document.querySelector('.jp-Notebook'))"),
                  timeout, "JupyterLab did not show the notebook")
        self.wait(lambda: self.js("return !!document.querySelector('.jp-Notebook .jp-Cell')"), timeout,
                  "the notebook has no cells")
        # The file browser stays open, as a user has it; only wait for the kernel.
        self.wait_idle(timeout)

    def command(self, name: str, args: dict | None = None):
        self.js("window.jupyterapp.commands.execute(arguments[0], arguments[1] || {});", name, args or {})

    def kernel_status(self) -> str:
        return self.js("""
            const w = window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
            return k ? k.status : 'none';""")

    def wait_idle(self, timeout: float = 120):
        self.wait(lambda: self.kernel_status() == "idle", timeout, "the kernel did not become idle")

    def run_all(self, timeout: float = 300):
        self.command("notebook:run-all-cells")
        time.sleep(1.0)
        self.wait(lambda: self.kernel_status() == "idle" and not self.js(
            "return [...document.querySelectorAll('.jp-InputPrompt')].some(p => p.textContent.includes('*'))"),
            timeout, "Run All did not finish")

    def save(self):
        self.command("docmanager:save")
        self.wait(lambda: not self.js("return window.jupyterapp.shell.currentWidget.context.model.dirty"), 30,
                  "the notebook was not saved")

    # -- plumbing

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def wait(self, condition, timeout: float, what: str, every: float = 0.25):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if condition():
                    return
            except Exception:  # the page may be mid-render; try again
                pass
            time.sleep(every)
        raise TimeoutError(f"{what} within {timeout:.0f} s")

    def drain_console(self) -> list[dict]:
        self.console += self.driver.get_log("browser")
        return self.console

    def screenshot(self, path: Path) -> Path:
        self.driver.save_screenshot(str(path))
        return path

    def element_png(self, css: str) -> np.ndarray:
        """The element's pixels as an RGB array (a real screenshot of what the page draws)."""
        from PIL import Image

        element = self.driver.find_element("css selector", css)
        return np.asarray(Image.open(io.BytesIO(base64.b64decode(element.screenshot_as_base64))).convert("RGB"))

    def type_weight(self, aspect: str, value: str) -> float:
        """Type `value` and Enter into `aspect`'s weight slider readout, as a user does; returns the moment of the
        key press (`time.perf_counter`), for timing what follows."""
        readout = self.driver.find_element("css selector", f".wb-weight-{aspect} .widget-readout")
        readout.click()
        self.js("document.execCommand('selectAll', false, null)")
        start = time.perf_counter()
        readout.send_keys(f"{value}\n")
        return start

    def click_at(self, x: float, y: float):
        """A real left click at page coordinates (CSS pixels), through the browser's input pipeline."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {
                "type": kind, "x": float(x), "y": float(y), "button": "left" if kind != "mouseMoved" else "none",
                "clickCount": 1})
            time.sleep(0.05)

    # -- the map

    def map_head(self, k: int = 8) -> list | None:
        """The first k x coordinates of the map's points: a cheap probe for a moved map (map_points sends
        every point and its page position, which at 10,000 points costs the page more than a redraw)."""
        return self.js(_PLOT_JS.replace("return plots;", f"""
            const v = plots.find(p => p.model.renderers.some(r => r.data_source && r.data_source.name === 'points'));
            if (!v) {{ return null; }}
            const src = v.model.renderers.find(r => r.data_source.name === 'points').data_source;
            return Array.from(src.data.x.slice(0, {int(k)}));"""))

    def watch_paints(self):
        """From now on, record in the page the time of each Enter key press and of the first paint after
        each change of the map's points (`paints`): the browser's own clock, so a probe that waits for a busy
        page does not count its wait as the page's. Called again (a second gesture), it starts the record afresh
        and adds no second listener (which would count each change twice)."""
        self.js(_PLOT_JS.replace("return plots;", """
            window.__wb_paints = {enter: [], drawn: []};
            if (!window.__wb_paints_keys) {
              window.__wb_paints_keys = true;
              document.addEventListener('keydown', e => { if (e.key === 'Enter') window.__wb_paints.enter.push(performance.now()); }, true);
            }
            for (const v of plots) {
              for (const r of v.model.renderers) {
                if (r.data_source && r.data_source.name === 'points' && !r.data_source.__wb_watched) {
                  r.data_source.__wb_watched = true;
                  r.data_source.change.connect(() => requestAnimationFrame(
                    () => setTimeout(() => window.__wb_paints.drawn.push(performance.now()), 0)));
                }
              }
            }
            return null;"""))

    def on_plots(self, script: str):
        """Run `script` in the page with `plots` bound to its Bokeh plot views (it returns what the script returns)."""
        return self.js(_PLOT_JS.replace("return plots;", script))

    def paints(self) -> dict:
        """What watch_paints recorded: {"enter": [ms], "drawn": [ms]} on the page's performance clock."""
        return self.js("return window.__wb_paints;")

    def map_points(self) -> dict | None:
        """The map's points as drawn: data x, y, title and their page coordinates (None: no plot view)."""
        return self.js(_PLOT_JS.replace("return plots;", """
            const v = plots.find(p => p.model.renderers.some(r => r.data_source && r.data_source.name === 'points'));
            if (!v) { return null; }
            const src = v.model.renderers.find(r => r.data_source.name === 'points').data_source;
            const box = v.el.getBoundingClientRect();
            const xs = src.data.x, ys = src.data.y;
            const px = [], py = [];
            for (let i = 0; i < xs.length; i++) {
              px.push(box.left + v.frame.x_scale.compute(xs[i]));
              py.push(box.top + v.frame.y_scale.compute(ys[i]));
            }
            const f = v.frame.bbox;
            return {x: Array.from(xs), y: Array.from(ys), title: Array.from(src.data.title), px: px, py: py,
                    frame: [box.left + f.left, box.top + f.top, box.left + f.right, box.top + f.bottom]};"""))

    def images_drawn(self, name: str) -> bool:
        """Whether the image glyph of renderer `name` (a large page's density level) has drawn all its images."""
        return bool(self.js(_PLOT_JS.replace("return plots;", """
            for (const v of plots) { for (const r of v.model.renderers) {
              if (r.name === arguments[0]) { const g = v.renderer_views.get(r); return !!(g && g.glyph._images_rendered); } } }
            return false;"""), name))

    def select_points(self, indices: list[int]) -> bool:
        """Select papers on the map as the lasso tool does when it ends: set the points source's selection."""
        return self.js(_PLOT_JS.replace("return plots;", """
            for (const v of plots) { for (const r of v.model.renderers) {
              if (r.data_source && r.data_source.name === 'points') {
                r.data_source.selected.indices = arguments[0]; return true; } } }
            return false;"""), [int(i) for i in indices])

    def selected_points(self) -> list[int] | None:
        """The rows of the map's points source that the page holds selected (None: no map)."""
        return self.js(_PLOT_JS.replace("return plots;", """
            for (const v of plots) { for (const r of v.model.renderers) {
              if (r.data_source && r.data_source.name === 'points') {
                return Array.from(r.data_source.selected.indices); } } }
            return null;"""))

    def points_webgl(self) -> bool | None:
        """Whether the map's points are drawn by WebGL (BokehJS falls back to canvas without it); None: no map."""
        return self.js(_PLOT_JS.replace("return plots;", """
            for (const v of plots) { for (const [m, rv] of v.renderer_views) {
              if (m.data_source && m.data_source.name === 'points') { return rv.glyph.glglyph != null; } } }
            return null;"""))

    def map_labels(self) -> dict | None:
        """The region labels the map draws: the LabelSet's text field, whether it is visible, and its texts."""
        return self.js(_PLOT_JS.replace("return plots;", """
            for (const v of plots) { for (const [m, rv] of v.renderer_views) {
              if (m.source && m.source.name === 'labels') {
                const field = m.text.field;
                return {field: field, visible: m.visible, texts: Array.from(m.source.data[field] || [])}; } } }
            return null;"""))

    def hover_at(self, x: float, y: float) -> list[dict]:
        """Move the pointer to page point (x, y), as a mouse does, and return each tooltip's box and text."""
        self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": 1, "y": 1})
        time.sleep(0.2)
        self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        time.sleep(0.5)
        return self.js("""
            const out = [];
            const walk = root => { for (const el of root.querySelectorAll('*')) {
              if (el.shadowRoot) { walk(el.shadowRoot); }
              if (String(el.className).includes('bk-tooltip-content')) {
                const r = el.getBoundingClientRect();
                if (r.width) { out.push({top: r.top, bottom: r.bottom, text: el.textContent}); } } } };
            walk(document);
            return out;""")

    def density_image(self) -> dict | None:
        """The map's density image as the page holds it (a map drawn by `panedensity`): where it lies (x, y, dw,
        dh, data units), whether it is drawn, and how many points the page draws beside it; None: no image."""
        return self.js(_PLOT_JS.replace("return plots;", """
            for (const v of plots) { for (const r of v.model.renderers) {
              if (r.data_source && r.data_source.name === 'density') {
                const d = r.data_source.data;
                const p = v.model.renderers.find(q => q.data_source && q.data_source.name === 'points');
                const first = k => d[k].length ? d[k][0] : null;
                return {x: first('x'), y: first('y'), dw: first('dw'), dh: first('dh'), visible: r.visible,
                        points: p.data_source.data.x.length}; } } }
            return null;"""))

    def zoom_map(self, x: float, y: float, clicks: int = 1):
        """Turn the mouse wheel over page point (x, y), as a user zooms in (negative clicks zoom out)."""
        self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for _ in range(abs(int(clicks))):
            self.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {
                "type": "mouseWheel", "x": x, "y": y, "deltaX": 0, "deltaY": -100 if clicks > 0 else 100})
            time.sleep(0.02)

    def drag_map(self, x: float, y: float, dx: float, dy: float, steps: int = 20):
        """Press at page point (x, y), move by (dx, dy) in `steps` mouse moves, release: a pan, as a hand does."""
        cdp = self.driver.execute_cdp_cmd
        cdp("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        cdp("Input.dispatchMouseEvent", {"type": "mousePressed", "x": x, "y": y, "button": "left", "clickCount": 1})
        for k in range(1, steps + 1):
            cdp("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x + dx * k / steps, "y": y + dy * k / steps,
                                             "button": "left", "buttons": 1})
            time.sleep(0.02)
        cdp("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": x + dx, "y": y + dy, "button": "left",
                                         "clickCount": 1})

    def count_changes(self, name: str) -> int:
        """How often the data source `name` of the map has changed since the first call for it (0 then)."""
        return self.js(_PLOT_JS.replace("return plots;", """
            const counts = window.__wb_changes = window.__wb_changes || {};
            if (!(arguments[0] in counts)) {
              counts[arguments[0]] = 0;
              for (const v of plots) { for (const r of v.model.renderers) {
                if (r.data_source && r.data_source.name === arguments[0]) {
                  r.data_source.change.connect(() => { counts[arguments[0]] += 1; }); } } }
            }
            return counts[arguments[0]];"""), name)

    def set_map_view(self, x0: float, x1: float, y0: float, y1: float):
        """Move the map's ranges to (x0, x1) x (y0, y1), as a box zoom ends."""
        self.js(_PLOT_JS.replace("return plots;", """
            const v = plots.find(p => p.model.renderers.some(r => r.data_source && r.data_source.name === 'points'));
            v.model.x_range.setv({start: arguments[0], end: arguments[1]});
            v.model.y_range.setv({start: arguments[2], end: arguments[3]});
            return null;"""), x0, x1, y0, y1)

    def source_length(self, name: str) -> int:
        return self.js(_PLOT_JS.replace("return plots;", """
            for (const v of plots) { for (const r of v.model.renderers) {
              if (r.data_source && r.data_source.name === arguments[0]) { return r.data_source.data.x.length; } } }
            return -1;"""), name)


def ink(pixels: np.ndarray, background=(255, 255, 255), tol: int = 30) -> int:
    """How many pixels differ from the background: what a map with points draws and an empty box does not."""
    return int((np.abs(pixels.astype(int) - np.array(background)).max(axis=2) > tol).sum())
