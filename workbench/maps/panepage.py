"""What the map pane adds to the page beside BokehJS: the page keeps the kernel's own data changes to itself.

`QUIET_ECHO_JS` runs once BokehJS is loaded (`pane.bokehjs_loader`), before any view of a pane exists.

Tried and left out: the page telling the kernel when it had painted a first frame, to end the pane's rest after
it (`pane.FRAME_PAUSE`, 0.5 s) early. At 10,000 papers the word came 0.3 s after the frame, but ipykernel handled
it during the rest only for the first weight change of a test; for the next it handled it once the change was
done, and the rest took its full time. The settling iterations after the rest vary more than that (1.9 to 3.2 s).
"""

from __future__ import annotations

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
