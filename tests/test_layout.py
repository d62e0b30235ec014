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
    for name in [
        "app",
        "graphql",
        "views",
        "migrations",
        "worker",
        "tests",
        "static",
        "alembic.ini",
        "pyproject.toml",
        "README.md",
    ]:
        assert (ROOT / name).exists(), name


def _imports(path: Path) -> set[str]:
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _violations(folder: str, forbidden: tuple[str, ...], *, allowed: tuple[str, ...] = ()) -> list[str]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for name in _imports(path):
            if name.startswith(forbidden) and not name.startswith(allowed):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def test_domain_imports_nothing_of_ours_but_domain() -> None:
    assert _violations("app/domain", ("app", "views", "worker", "tests", "bench"), allowed=("app.domain",)) == []


def test_api_views_and_worker_never_import_each_other() -> None:
    problems = (
        _violations("app/api", ("views", "worker", "tests", "bench"))
        + _violations("views", ("app.api", "worker", "tests", "bench"))
        + _violations("worker", ("app.api", "views", "tests", "bench"))
    )
    assert problems == []


def test_services_do_not_reach_up_into_the_interfaces() -> None:
    composition_roots = {"cli.py", "demo.py", "main.py"}
    problems = [
        line
        for line in _violations("app", ("views", "worker", "tests", "bench", "app.api"), allowed=())
        if not line.startswith(("app/api/",)) and Path(line.split(" ")[0]).name not in composition_roots
    ]
    assert problems == []
