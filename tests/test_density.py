"""maps/density.py: Datashader's pixel counts against numpy's own 2-d histogram, and the shaded image's shape."""

import io

import numpy as np
import pytest

pytest.importorskip("datashader")

from workbench.maps import density  # noqa: E402


@pytest.fixture(scope="module")
def coords():
    rng = np.random.default_rng(0)
    return np.concatenate([rng.normal(0, 1, (3000, 2)), rng.normal(4, 0.3, (500, 2))]).astype(np.float32)


def test_counts_match_numpy_histogram(coords):
    view = density.View((-3.0, 5.0), (-2.0, 6.0), width=40, height=30)
    inside = coords[view.holds(coords)]
    # Points on a pixel's edge may fall either side; none of these random points lies on one.
    expected, _, _ = np.histogram2d(inside[:, 1], inside[:, 0], bins=(30, 40), range=(view.y_range, view.x_range))
    got = density.counts(coords, view)
    assert got.shape == (30, 40)
    assert got.sum() == len(inside) < len(coords)
    np.testing.assert_array_equal(got, expected)


def test_view_around_holds_every_point(coords):
    view = density.View.around(coords, width=50, height=50)
    assert view.holds(coords).all()
    assert density.counts(coords, view).sum() == len(coords)


def test_shaded_png_round_trip(coords):
    from PIL import Image

    view = density.View.around(coords, width=64, height=48)
    rgba = density.shaded(coords, view)
    assert rgba.shape == (48, 64) and rgba.dtype == np.uint32
    # Empty pixels are transparent, counted ones opaque.
    alpha = rgba >> 24
    empty = density.counts(coords, view) == 0
    assert (alpha[empty] == 0).all() and (alpha[~empty] > 0).all()
    image = Image.open(io.BytesIO(density.png(rgba)))
    assert image.size == (64, 48) and image.mode == "RGBA"
    # The PNG's top row is the view's top: the image was flipped from Bokeh's bottom-up rows.
    top = np.asarray(image)[0, :, 3]
    np.testing.assert_array_equal(top, alpha[-1].astype(np.uint8))
