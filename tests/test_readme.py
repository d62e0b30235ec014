"""README's settings table is generated from the code's settings table and must match it."""

from pathlib import Path

from app.infra.config import settings_markdown

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_settings_table_is_current() -> None:
    text = README.read_text()
    begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
    assert begin in text and end in text
    table = text.split(begin, 1)[1].split(end, 1)[0].strip()
    assert table == settings_markdown(), "run `python -m app.infra.config` and paste the table into README.md"
