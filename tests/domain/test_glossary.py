"""The glossary: one source for tooltips and docs/glossary.md; exit codes and signals in plain words."""

from __future__ import annotations

from pathlib import Path

from app.domain.presentation import glossary

ROOT = Path(__file__).resolve().parents[2]


def test_docs_glossary_is_generated_from_the_module() -> None:
    assert (ROOT / "docs" / "glossary.md").read_text() == glossary.render_markdown(), (
        "regenerate: python -m app.domain.presentation.glossary > docs/glossary.md"
    )


def test_terms_the_issue_names_are_explained_once() -> None:
    names = [t.term for t in glossary.TERMS]
    assert len(names) == len(set(names))
    for term in ("Advice", "generation", "CONVERGED", "DESIRED_STATE_OBSERVED", "NonZeroExitCode", "heimdallJobId"):
        found = glossary.BY_NAME[term]
        assert found.plain and len(found.meaning) > 30


def test_exit_codes_and_signals_in_plain_words() -> None:
    assert glossary.exit_text(137) == "128 + 9: killed by SIGKILL (" + glossary.SIGNALS[9][1] + ")"
    assert "SIGSEGV" in glossary.exit_text(139) and "SIGTERM" in glossary.exit_text(143)
    assert "SIGABRT" in glossary.exit_text(134)
    assert glossary.exit_text(0) == "success"
    assert "not found" in glossary.exit_text(127)
    assert glossary.exit_text(0, 9).startswith("killed by SIGKILL")
    assert glossary.exit_text(3) == "the program's own error code (see the log)"
    assert glossary.exit_text(128 + 40) == "128 + 40: killed by signal 40"
    assert glossary.exit_text(None) == ""
