"""What the map pane adds to the page beside BokehJS: no echo of the kernel's own data, and word of each paint.

`QUIET_ECHO_JS` runs once BokehJS is loaded (`pane.bokehjs_loader`). `PaintAck` tells the kernel when the page
has painted a change of the points, so that the pane's rest after a first frame (`pane.FRAME_PAUSE`) ends as
soon as the frame is on screen instead of after a fixed time.
"""

from __future__ import annotations

import threading

# jupyter_bokeh's view sends every change of the page's document to the kernel, also the kernel's own changes
# it has just applied (BokehJS marks those sync=false; bokeh's server drops them, jupyter_bokeh does not). For
# a data source that is the whole source again: at 10,000 papers 0.9 MB of JSON, which the page took 0.35 s to
# encode before it painted a weight change's first frame, and the kernel 0.17 s to decode. This keeps the
# kernel's own data changes in the page. The selection's echo still goes back (`PaneDensity` expects it).
QUIET_ECHO_JS = """
(function () {
  if (typeof window.Bokeh === 'undefined') { return; }
  const proto = window.Bokeh.require('document').Document.prototype;
  if (proto._wb_quiet_echo) { return; }
  proto._wb_quiet_echo = true;
  const own = (e) => e.sync === false && ((e.kind === 'ModelChanged' && e.attr === 'data')
                                          || e.kind === 'ColumnsStreamed' || e.kind === 'ColumnsPatched');
  const wrapped = new WeakMap();
  const on_change = proto.on_change, remove_on_change = proto.remove_on_change;
  proto.on_change = function (callback, allow_batches) {
    if (!String(callback).includes('_change_event')) { return on_change.call(this, callback, allow_batches); }
    const quiet = (event) => { if (!own(event)) { callback(event); } };  // jupyter_bokeh's sender only
    wrapped.set(callback, quiet);
    return on_change.call(this, quiet, allow_batches);
  };
  proto.remove_on_change = function (callback) {
    return remove_on_change.call(this, wrapped.get(callback) || callback);
  };
})();
"""
# After each change of the points' data, once the page has painted it, the page counts it in a small source that
# jupyter_bokeh carries to the kernel (a change the page makes itself, so it is sent).
PAINTED_JS = """
requestAnimationFrame(() => setTimeout(() => { painted.data = {n: [(painted.data.n[0] || 0) + 1]}; }, 0));
"""


class PaintAck:
    """The page's word that it painted a change of `source` (a Bokeh ColumnDataSource), as a threading.Event.

    The kernel's comm messages are handled while the pane's weight change runs (ipykernel's widget
    messages: in a thread of their own), so the word arrives during the pane's rest; where it cannot, the rest
    waits its full time, as before."""

    def __init__(self, source):
        from bokeh.models import ColumnDataSource, CustomJS

        self.painted = threading.Event()
        self.source = ColumnDataSource({"n": []}, name="painted")
        source.js_on_change("data", CustomJS(args=dict(painted=self.source), code=PAINTED_JS))
        self.source.on_change("data", lambda attr, old, new: self.painted.set())

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds` for a paint since the last `expect`; whether it came."""
        return self.painted.wait(seconds)

    def expect(self) -> None:
        """Forget earlier paints: call right before changing the source."""
        self.painted.clear()
