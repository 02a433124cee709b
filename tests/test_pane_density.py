"""The pane's density path (maps/panedensity.py) without a browser: 20,000 papers, the threshold forced to 2,000.

Above the threshold the map is an image; a view that holds few papers shows them as points; a tap anywhere
finds the nearest paper; a weight change redraws the density from the new coordinates, with its labels.
"""

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("datashader")

from workbench.maps.density import View  # noqa: E402
from workbench.maps.mapview import region_color  # noqa: E402
from workbench.maps.options import PaneCallbacks, PaneView  # noqa: E402
from workbench.maps.pane import MapPane  # noqa: E402
from workbench.maps.panedensity import shaded_regions  # noqa: E402

N, ABOVE, FEW = 20_000, 2_000, 500
CENTRES = [(0, 0), (10, 0), (0, 10), (10, 10)]


@pytest.fixture(scope="module")
def coords():
    rng = np.random.default_rng(0)
    return np.concatenate([rng.normal(c, 1.0, (N // 4, 2)) for c in CENTRES])


@pytest.fixture(scope="module")
def meta():
    return pd.DataFrame({"doc_id": [f"p{i}" for i in range(N)], "title": [f"Paper {i}" for i in range(N)],
                         "year": [2000 + i % 20 for i in range(N)]})


def _pane(coords, meta, **callbacks):
    on_weights = callbacks.pop("on_weights", None)
    return MapPane(coords, meta, ["a", "b"], {"a": 0.5, "b": 0.5}, on_weights=on_weights,
                   callbacks=PaneCallbacks(**callbacks), view=PaneView(density_above=ABOVE, points_in_view=FEW))


def _ask(pane, x0, x1, y0, y1):
    return pane.request_view({"x0": [x0], "x1": [x1], "y0": [y0], "y1": [y1]})


@pytest.fixture(scope="module")
def pane(coords, meta):
    return _pane(coords, meta)


def test_above_the_threshold_the_map_is_an_image_and_no_points_travel(pane, coords, meta):
    assert pane.density and len(pane.source.data["x"]) == 0
    image = pane.image_source.data["image"][0]
    assert image.shape == (PaneView().height, PaneView().width) and pane.image_glyph.visible
    assert (image >> 24).astype(bool).sum() > 1000  # drawn pixels
    # Every paper lies inside the image, and the hover keeps the fields a small map's has.
    x0, y0 = pane.image_source.data["x"][0], pane.image_source.data["y"][0]
    assert x0 < coords[:, 0].min() and x0 + pane.image_source.data["dw"][0] > coords[:, 0].max()
    assert y0 < coords[:, 1].min() and y0 + pane.image_source.data["dh"][0] > coords[:, 1].max()
    assert {"title", "year", "color", "group"} <= set(pane.source.data) and "hover" not in pane.source.data
    small = MapPane(coords[:500], meta.head(500), ["a"], {"a": 1.0}, view=PaneView(density_above=ABOVE))
    assert not small.density and len(small.source.data["x"]) == 500  # below it, every point as before


def _rgb(packed) -> tuple[int, int, int]:
    return int(packed) & 255, (int(packed) >> 8) & 255, (int(packed) >> 16) & 255


def test_the_image_has_the_colours_of_the_regions(pane, coords):
    """A pixel of one region's papers has that region's colour, as its label in the legend; a mixed pixel a mix."""
    data = pane.image_source.data
    image = data["image"][0]
    height, width = image.shape
    checked = 0
    for i in (0, N // 4, N // 2, 3 * N // 4):  # a paper of each cluster (each cluster is one region or more)
        col = int((coords[i, 0] - data["x"][0]) / data["dw"][0] * width)
        row = int((coords[i, 1] - data["y"][0]) / data["dh"][0] * height)
        colour = region_color(pane.all_numbers[i]).lstrip("#")
        got = _rgb(image[row, col])
        assert image[row, col] >> 24 > 0
        if (pane.all_numbers[np.hypot(*(coords - coords[i]).T) < 0.2] == pane.all_numbers[i]).all():
            assert got == tuple(int(colour[k:k + 2], 16) for k in (0, 2, 4)), (i, got, colour)
            checked += 1
    assert checked >= 2
    view = View((0.0, 2.0), (0.0, 1.0), width=2, height=1)
    red, blue = np.array([[0.5, 0.5]] * 3), np.array([[0.5, 0.5], [1.5, 0.5]])
    packed = shaded_regions([red, blue], ["#ff0000", "#0000ff"], view)
    assert _rgb(packed[0, 0]) == (191, 0, 64) and _rgb(packed[0, 1]) == (0, 0, 255)  # 3 red, 1 blue; 1 blue
    assert packed[0, 0] >> 24 == 255 and 0 < packed[0, 1] >> 24 < 255  # the fuller pixel is the more opaque


def test_a_zoom_redraws_and_a_small_view_shows_its_papers_as_points(pane, coords):
    before = pane.image_source.data["image"][0].copy()
    assert _ask(pane, -2.0, 12.0, -2.0, 2.0) is not None  # the bottom row: still thousands, still an image
    assert pane.image_glyph.visible and not np.array_equal(pane.image_source.data["image"][0], before)
    assert _ask(pane, -2.0, 12.0, -2.0, 2.0) is None  # the view drawn already (the kernel's own range change)
    view = _ask(pane, -0.3, 0.3, -0.3, 0.3)
    inside = np.flatnonzero(View((-0.3, 0.3), (-0.3, 0.3)).holds(coords))
    assert 0 < len(inside) <= FEW and view is not None
    assert not pane.image_glyph.visible
    np.testing.assert_array_equal(pane.shown, inside)
    assert pane.source.data["title"] == [f"Paper {i}" for i in inside]
    np.testing.assert_allclose(pane.source.data["x"], coords[inside, 0])
    _ask(pane, -5.0, 15.0, -5.0, 15.0)
    assert pane.image_glyph.visible and len(pane.source.data["x"]) == 0


def test_a_selection_outlives_the_views_it_was_made_in(coords, meta):
    picked = []
    pane = _pane(coords, meta, on_select=picked.append)
    _ask(pane, -0.3, 0.3, -0.3, 0.3)
    pane.source.selected.indices = [0, 2]  # the lasso, in the browser
    chosen = [int(pane.shown[0]), int(pane.shown[2])]
    assert picked[-1] == chosen and "2 papers selected" in pane.selection_info.value
    _ask(pane, -5.0, 15.0, -5.0, 15.0)  # zoomed out: no points drawn, the selection kept
    pane.selection_changed([])  # the page sends the kernel's own change back (jupyter_bokeh): not the user's
    assert pane.selected_papers == chosen and picked[-1] == chosen
    _ask(pane, -0.3, 0.3, -0.3, 0.3)
    assert pane.source.selected.indices == [0, 2]
    pane.selection_changed([0, 2])  # the echo of the rows selected again
    assert pane.selected_papers == chosen and len(picked) == 1
    pane.source.selected.indices = []  # the user clears the selection
    assert pane.selected_papers == [] and picked[-1] == []


def test_a_tap_anywhere_finds_the_nearest_paper(coords, meta):
    taps = []
    pane = _pane(coords, meta, on_tap=lambda x, y, i: taps.append(i) or f"paper {i}")
    spot = coords[123] + np.array([0.01, -0.01])  # no paper there, one a pixel away
    pane.tap(*spot)
    assert taps[-1] == int(np.argmin(np.hypot(*(coords - spot).T))) == 123
    assert pane.detail.value == "paper 123"
    pane.tap(5.0, 50.0)  # far from every paper: an empty spot, read as today
    assert taps[-1] is None


def test_a_weight_change_redraws_the_density_from_the_new_coordinates(coords, meta):
    moved = coords * 2.0 + 100.0
    frames = []

    def on_weights(weights, on_frame=None):
        on_frame(coords + 50.0)
        frames.append(pane.image_source.data["x"][0])
        return moved

    labels = [(100.0, 100.0, "first region", "detail", 1)]
    pane = _pane(coords, meta, on_weights=on_weights, on_labels=lambda: labels)
    _ask(pane, -0.3, 0.3, -0.3, 0.3)  # zoomed in: the new layout shows the whole map again
    assert pane.set_weights({"a": 1.0}) is not None
    assert 40 < frames[0] < 50 + coords[:, 0].min()  # the first frame was drawn at its own place
    assert pane.image_glyph.visible and pane.image_source.data["x"][0] < moved[:, 0].min()
    assert pane.figure.x_range.start < moved[:, 0].min() and pane.figure.x_range.end > moved[:, 0].max()
    assert pane.figure.x_range.reset_start == pane.figure.x_range.start
    assert pane.label_source.data["name"] == ["1. first region"] and "first region" in pane.legend.value
