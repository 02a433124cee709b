"""Progress bars: one stopped early on purpose ends at its count, not in the widget's error colour."""

import io

from workbench.core.progress import close_bar, progress_bar


def test_a_bar_stopped_early_ends_at_its_count_not_in_red():
    from tqdm.notebook import tqdm as notebook_tqdm

    bar = notebook_tqdm(total=10, desc="heads", display=False)
    bar.update(4)
    bar.set_postfix(loss="0.1")
    close_bar(bar)
    widget = bar.container.children[1]
    assert widget.bar_style != "danger" and widget.max == 4 and widget.value == 4
    assert "stopped early" in str(bar.postfix)

    plain = notebook_tqdm(total=10, display=False)
    plain.update(4)
    plain.close()  # what tqdm itself does: the error colour
    assert plain.container.children[1].bar_style == "danger"

    text = progress_bar(10, "train", enabled=True)
    text.fp = io.StringIO()
    text.update(10)
    close_bar(text)  # a finished bar is left as it is
    assert text.n == text.total == 10
    close_bar(progress_bar(10, "off", enabled=False))  # a disabled bar: nothing to do


def test_models_load_without_transformers_bars_and_leave_them_as_they_were():
    from transformers.utils import logging as hf_logging

    from workbench.core.models import no_loading_bars

    assert hf_logging.is_progress_bar_enabled()
    with no_loading_bars():
        assert not hf_logging.is_progress_bar_enabled()  # no "Loading weights 0%" left in a report
    assert hf_logging.is_progress_bar_enabled()  # the user's own downloads still show theirs
