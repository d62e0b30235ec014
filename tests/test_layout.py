"""The repository layout keeps graphql/ free of Python so graphql-core is never shadowed."""

from pathlib import Path

import graphql

ROOT = Path(__file__).resolve().parent.parent


def test_imported_graphql_is_graphql_core() -> None:
    origin = Path(graphql.__file__).resolve()
    assert "site-packages" in origin.parts, origin
    assert not origin.is_relative_to(ROOT / "graphql")
    assert hasattr(graphql, "build_schema")


def test_graphql_folder_holds_no_python() -> None:
    assert (ROOT / "graphql").is_dir()
    assert not list((ROOT / "graphql").rglob("*.py"))


def test_top_level_layout() -> None:
    for name in ["app", "graphql", "views", "migrations", "worker", "tests", "static", "alembic.ini", "pyproject.toml", "README.md"]:
        assert (ROOT / name).exists(), name
