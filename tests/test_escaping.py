"""Paper text and aspect names are never rendered as markup in a notebook's tables."""

import pandas as pd

PAYLOAD = "<img src=x onerror=alert(1)>"


def test_styled_tables_escape_cells_and_labels():
    from workbench.core.display import styled

    frame = pd.DataFrame({PAYLOAD: [0.5]}, index=[f"aspect {PAYLOAD}"]).assign(view=[PAYLOAD])
    html = styled(frame).format("{:.0%}", subset=[PAYLOAD]).to_html()
    assert "<img" not in html and html.count("&lt;img src=x onerror=alert(1)&gt;") == 3
    assert "50%" in html  # numbers still formatted


def test_notebooks_build_no_styler_caption_from_data():
    """A Styler caption is not escaped by the option: no notebook may set one (02's example paper did)."""
    from pathlib import Path

    for path in sorted(Path(__file__).resolve().parents[1].glob("notebooks/*.ipynb")):
        assert "set_caption(" not in path.read_text(), path.name


def test_notebooks_style_tables_only_through_the_escaping_helper():
    import re
    from pathlib import Path

    for path in sorted(Path(__file__).resolve().parents[1].glob("notebooks/*.ipynb")):
        assert not re.search(r"\\.style\\b", path.read_text()), f"{path.name} styles a table without workbench.core.display.styled"
