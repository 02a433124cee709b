"""Marked pairs, the lasso's selection, and fitting the aspect weights to the marks: `MapPane`'s part that
records what the user means by similar.

A mixin rather than a widget of its own: the marks live on the pane (`pane.marks`, `pane.mark(True)`,
`pane.fit_marks()` are its public face), and fitting moves the pane's map through its `set_weights`.
"""

from __future__ import annotations

from typing import Sequence

from ..core.display import esc
from .mapview import as_text, message_html


class PaneMarks:
    """The marking half of `MapPane`. The pane provides `meta`, `aspects`, `tapped`, `marks`, `source`,
    `mark_info`, `selection_info`, `detail`, the callbacks `on_select`, `on_marks` and `on_fit_weights`,
    `set_weights`, `_show` and `_fail`, and `select_papers` and `selected_count` (`panedensity.PaneDensity`)."""

    def _title(self, i: int) -> str:
        title = as_text(self.meta["title"].iloc[i], 60) if "title" in self.meta else ""
        return title or f"#{i}"

    def _marks_html(self) -> str:
        n_sim = sum(1 for *_, s in self.marks if s)
        pair = (" and ".join(esc(self._title(i)) for i in self.tapped) if len(self.tapped) == 2
                else "tap two papers to compare them")
        return (f"<small>Pair: {pair}<br>{n_sim} similar, {len(self.marks) - n_sim} not similar marked</small>")

    def _selection_html(self) -> str:
        n = self.selected_count() if hasattr(self, "source") else 0
        return ("<small>Lasso or box-select papers (toolbar above the map).</small>" if not n else
                f"<small>{n} papers selected: <code>explorer.selection</code> is the table, "
                "<code>explorer.export_selection('papers.ris')</code> (or .csv) writes them.</small>")

    def _on_selection(self, indices) -> None:
        try:
            if self.on_select is not None:
                self.on_select([int(i) for i in indices])
            self.selection_info.value = self._selection_html()
        except Exception as exc:
            self._fail("Keeping the selection", exc)

    def select(self, indices: Sequence[int]) -> None:
        """Select papers by row index, as the lasso does (the map highlights them; `on_select` keeps them)."""
        self.select_papers(indices)  # on a density map, also papers out of view (`panedensity`)

    def _marks_changed(self) -> None:
        self.mark_info.value = self._marks_html()
        if self.on_marks is not None:
            try:
                self.on_marks(list(self.marks))
            except Exception as exc:
                self._fail("Keeping the marks", exc)

    def mark(self, similar: bool) -> tuple[int, int, bool] | None:
        """Record the last two tapped papers as a similar (or not similar) pair."""
        if len(self.tapped) < 2:
            self._show(message_html("Tap two papers first, then mark them similar or not similar."))
            return None
        i, j = self.tapped
        pair = (int(i), int(j), bool(similar))
        # Marking the same pair again replaces the earlier mark: the user changed their mind.
        self.marks = [m for m in self.marks if {m[0], m[1]} != {i, j}] + [pair]
        self._marks_changed()
        return pair

    def clear_marks(self) -> None:
        """Forget the marked pairs and the tapped papers."""
        self.marks, self.tapped = [], []
        self._marks_changed()

    def fit_marks(self) -> dict[str, float] | None:
        """Fit the aspect weights to the marked pairs (`on_fit_weights`) and re-layout the map with them.

        Shows the fit's summary (escaped) above the layout message. Returns the weights the
        map uses (negative ones clipped to 0), or None when there was nothing to fit or it failed.
        """
        if self.on_fit_weights is None:
            return None
        if not self.marks:
            self._show(message_html("Mark a few pairs first (tap two papers, then similar / not similar)."))
            return None
        try:
            self._show(message_html(f"Fitting the weights to {len(self.marks)} marked pairs…"))
            fit = self.on_fit_weights(list(self.marks))
            fitted = dict(fit.weights if hasattr(fit, "weights") else fit)
            unknown = set(fitted) - set(self.aspects)
            if unknown:
                raise ValueError(f"on_fit_weights returned unknown aspects: {sorted(unknown)}")
            text = fit.summary() if hasattr(fit, "summary") else ", ".join(f"{a} {w:.2f}" for a, w in fitted.items())
            positive = {a: max(float(fitted.get(a, 0.0)), 0.0) for a in self.aspects}
            total = sum(positive.values())
            if total <= 0:
                raise ValueError(f"no aspect has a positive fitted weight ({fitted}): the map cannot use them")
            mapped = {a: w / total for a, w in positive.items()}
            note = ""
            negatives = sorted(a for a, w in fitted.items() if w < 0)
            if negatives:
                note = (f"Negative weights ({', '.join(negatives)}) cannot be drawn on a map; "
                        "it uses the positive weights only.")
            self.set_weights(mapped)  # refits warm through on_weights and shows the layout (or its error)
            self._show(f"<pre style='white-space:pre-wrap'>{esc(text)}</pre>"
                       + (message_html(note) if note else "") + self.detail.value)
            return mapped
        except Exception as exc:
            self._fail("Fitting the weights", exc)
            return None
