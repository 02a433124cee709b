"""Where a weight change of the map pane spends its time in JupyterLab: timestamps in the kernel and in the page.

`KERNEL_CELL` (a notebook cell run after the pane is made) logs, on the wall clock, into a file: the slider's
message reaching `set_weights`, `on_weights`, the engine's neighbour search and first iterations
(`engine.reweighted_affinities`, `engine.reweight`), the first frame handed over and the rest after it, each
message jupyter_bokeh sends to the page (with its size) and each it receives from it. `PAGE_JS` logs, in the
page: the Enter key, every kernel patch BokehJS applies, each paint of the map (its length), and each message the
page sends to the kernel (its size). `summary` lines the two up per gesture (from one Enter key to the next).

Used by tests/test_jupyterlab.py when WORKBENCH_PANE_TIMELINE names a folder (docs/results.md has the command).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

KERNEL_CELL = """
import json as _json, time as _time
import workbench.maps.engine as _engine
_log = open({path!r}, "a", buffering=1)
def _lg(*a):
    _log.write(_json.dumps([_time.time(), *a]) + "\\n")
def _timed(module, name):
    f = getattr(module, name)
    def g(*a, **k):
        _lg(name); r = f(*a, **k); _lg(name + " end"); return r
    setattr(module, name, g)
for _name in ("reweighted_affinities", "reweight", "lay_out_again"):
    _timed(_engine, _name)
_send = pane.bokeh.send
def _sent(content, buffers=None):
    _lg("send", len(_json.dumps(content)) + sum(len(b) for b in buffers or []))
    return _send(content, buffers)
pane.bokeh.send = _sent
pane.bokeh.on_msg(lambda w, content, buffers: _lg("received", len(_json.dumps(content))))
_set_weights, _on_weights = pane.set_weights, pane.on_weights
def _set(w):
    _lg("set_weights"); r = _set_weights(w); _lg("set_weights end"); return r
def _weights(weights, on_frame=None):
    def frame(c):
        _lg("frame"); on_frame(c); _lg("frame end")
    _lg("on_weights"); r = _on_weights(weights, on_frame=frame); _lg("on_weights end"); return r
pane.set_weights, pane.on_weights = _set, _weights
"""

# Appended to tests/lab_harness's plot finder (`_PLOT_JS`): `plots` holds the page's Bokeh plot views.
PAGE_JS = """
window.__wb_log = [];
const L = (...a) => window.__wb_log.push([performance.timeOrigin + performance.now(), ...a]);
document.addEventListener('keydown', e => { if (e.key === 'Enter') { L('enter'); } }, true);
const send = WebSocket.prototype.send;
WebSocket.prototype.send = function (d) { L('page sends', typeof d === 'string' ? d.length : d.byteLength);
                                          return send.call(this, d); };
for (const v of plots) {
  const doc = v.model.document;
  const apply = doc.apply_json_patch.bind(doc);
  doc.apply_json_patch = (p, b) => { const t0 = performance.now(); const r = apply(p, b);
    L('applied', p.events.map(e => (e.cols || []).join('+') || e.kind).join(','), performance.now() - t0); return r; };
  const paint = v.paint.bind(v);
  v.paint = (...a) => { const t0 = performance.now(); const r = paint(...a); L('paint', performance.now() - t0); return r; };
}
return plots.length;
"""


def summary(kernel_log: Path, page_log: list) -> list[str]:
    """One line per gesture (from one Enter key to the next): seconds from the key press to each step."""
    events = sorted([(row[0] / 1000, "page", row[1:]) for row in page_log]
                    + [(row[0], "kernel", row[1:]) for row in map(json.loads, kernel_log.read_text().splitlines())],
                    key=lambda e: e[0])
    enters = [t for t, side, row in events if side == "page" and row[0] == "enter"]
    lines = []
    for g, t0 in enumerate(enters):
        end = enters[g + 1] if g + 1 < len(enters) else float("inf")
        gesture = [(t - t0, side, row) for t, side, row in events if t0 <= t < end]

        def at(name, side="kernel"):
            return next((t for t, s, row in gesture if s == side and row[0] == name), float("nan"))

        applied = [(t, row[1], row[2]) for t, s, row in gesture if s == "page" and row[0] == "applied"]
        paints = [(t, row[1]) for t, s, row in gesture if s == "page" and row[0] == "paint" and row[1] > 50]
        big_out = [row[1] for t, s, row in gesture if s == "page" and row[0] == "page sends" and row[1] > 100_000]
        big_in = [row[1] for t, s, row in gesture if s == "kernel" and row[0] == "received" and row[1] > 100_000]
        sends = sum(1 for t, s, row in gesture if s == "kernel" and row[0] == "send")
        search, first, again = at("reweighted_affinities"), at("reweight"), at("lay_out_again")
        lines.append(
            f"gesture {g + 1}: message in {at('set_weights'):.2f}, search {search:.2f} to {at('reweighted_affinities end'):.2f}, "
            f"first iterations to {at('frame'):.2f} (from {first:.2f}), rest to {at('frame end'):.2f}, settle iterations "
            f"to {at('on_weights end'):.2f}{'' if math.isnan(again) else ' (laid out again)'}, "
            f"set_weights end {at('set_weights end'):.2f}; page: applied "
            f"{', '.join(f'{what or chr(45)} {t:.2f} ({ms:.0f} ms)' for t, what, ms in applied)}; paints over 50 ms "
            f"{', '.join(f'{t:.2f} ({ms:.0f} ms)' for t, ms in paints)}; {sends} messages to the page; "
            f"page to kernel over 100 kB: {big_out or 'none'}, received {big_in or 'none'}")
    return lines
