"""Progress bars for long work (tqdm's, a widget in Jupyter and text in a terminal or a log), and notices.

    bar = progress_bar(config.max_steps, "train challenge", enabled=progress)
    ...                       # bar.update(1) per step; early stopping may break out
    close_bar(bar)

A notebook bar closed before its total turns red, as for an error; `close_bar` ends a bar
that stopped early (on purpose) at what it did instead, so a report does not show
failures where training simply stopped.
"""

from __future__ import annotations

NOTICE = "[notice] "  # `workbench run` picks these lines out of a stage's output (runner.Progress)


def notice(text: str) -> None:
    """Say that a stage does less than asked (decoding off, an aspect or a table skipped), and why.

    Printed in the notebook as usual; `workbench run` also prints it on the terminal as the stage
    runs and lists it in its closing summary, so it is not found only inside a report.
    """
    print(NOTICE + " ".join(str(text).split()), flush=True)


def progress_bar(total: int, desc: str, enabled: bool = True):
    """A tqdm bar (tqdm.auto: the notebook widget where there is one); disabled bars cost nothing."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled)


def close_bar(bar) -> None:
    """Close `bar`; one that stopped short of its total ends at its count, not in the widget's error colour."""
    if not bar.disable and bar.total and 0 < bar.n < bar.total:
        done, postfix = bar.n, bar.postfix
        bar.reset(total=done)  # sets the widget's maximum too; the count restarts at 0
        bar.update(done)
        if postfix:
            bar.set_postfix_str(f"{postfix}, stopped early", refresh=False)
    bar.close()
