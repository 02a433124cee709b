"""Maps drawn as density: Datashader counts the points of a view into pixels and shades them.

Past a few hundred thousand points a browser cannot hold one glyph per paper, so the pane and the
page draw those maps as an image of how many papers fall in each pixel, as Datashader does for the
Bokeh ecosystem. Datashader is imported only here, and only when a map is that large: it comes with
the scale extra (`pip install -e ".[scale]"`). Its first aggregation compiles (about 1.5 s on 2 cores);
later ones take tens of milliseconds at a million points.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

SCALE_EXTRA = 'pip install -e ".[scale]"'
# Papers drawn as points, not density, once a view holds at most this many (the pane and the page).
POINTS_IN_VIEW = 20_000
# Shading: eq_hist spreads the counts over the colour ramp, so sparse regions stay visible beside
# dense ones (a linear ramp shows only the densest clusters at a million points).
SHADE_HOW = "eq_hist"
RAMP = ("#dfe9f3", "#08306b")


def _datashader():
    try:
        import datashader
        import datashader.transfer_functions as tf
    except ImportError as exc:
        raise ImportError(f"drawing a map this large needs Datashader, which is not installed: {SCALE_EXTRA}") from exc
    return datashader, tf


@dataclass(frozen=True)
class View:
    """A rectangle of the map and the pixels it is drawn into."""

    x_range: tuple[float, float]
    y_range: tuple[float, float]
    width: int = 600
    height: int = 600

    @classmethod
    def around(cls, coords: np.ndarray, width: int = 600, height: int = 600, pad: float = 0.02) -> "View":
        """The view that holds every point of `coords` (n x 2), with a small margin so edge points are drawn."""
        lo, hi = coords.min(axis=0).astype(float), coords.max(axis=0).astype(float)
        span = np.maximum(hi - lo, 1e-9) * pad
        return cls((lo[0] - span[0], hi[0] + span[0]), (lo[1] - span[1], hi[1] + span[1]), width, height)

    def holds(self, coords: np.ndarray) -> np.ndarray:
        """A boolean mask of the rows of `coords` inside this view."""
        x, y = coords[:, 0], coords[:, 1]
        return (x >= self.x_range[0]) & (x <= self.x_range[1]) & (y >= self.y_range[0]) & (y <= self.y_range[1])


def counts(coords: np.ndarray, view: View) -> np.ndarray:
    """Papers per pixel (height x width, row 0 at the bottom, as Bokeh's image glyph expects)."""
    import pandas as pd

    datashader, _ = _datashader()
    coords = np.asarray(coords, dtype=np.float32)
    # A DataFrame over the two columns: Datashader reads them without copying the float32 data.
    frame = pd.DataFrame({"x": coords[:, 0], "y": coords[:, 1]}, copy=False)
    canvas = datashader.Canvas(view.width, view.height, x_range=view.x_range, y_range=view.y_range)
    return np.asarray(canvas.points(frame, "x", "y").data)


def shaded(coords: np.ndarray, view: View, ramp: tuple[str, str] = RAMP) -> np.ndarray:
    """The view as an RGBA image packed into uint32 (height x width), for Bokeh's `image_rgba` glyph."""
    import xarray

    _, tf = _datashader()
    grid = xarray.DataArray(counts(coords, view), dims=("y", "x"))
    return np.asarray(tf.shade(grid, cmap=list(ramp), how=SHADE_HOW).data, dtype=np.uint32)


def png(rgba: np.ndarray) -> bytes:
    """A shaded image as PNG bytes, top row first (the page embeds these as data URLs)."""
    from PIL import Image

    pixels = np.ascontiguousarray(np.flipud(rgba)).view(np.uint8).reshape(rgba.shape[0], rgba.shape[1], 4)
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGBA").save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()
