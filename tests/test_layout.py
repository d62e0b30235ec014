"""The repository layout: graphql/ holds no Python, the layers import downwards only, areas own their SQL."""

import ast
import re
from collections.abc import Iterator
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


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _walk_runtime(node: ast.AST) -> Iterator[ast.AST]:
    """Every node that runs when the module is imported or called: `if TYPE_CHECKING:` bodies are annotations only."""
    for child in ast.iter_child_nodes(node):
        if _is_type_checking(child):
            assert isinstance(child, ast.If)
            for other in child.orelse:
                yield other
                yield from _walk_runtime(other)
            continue
        yield child
        yield from _walk_runtime(child)


def _imports(path: Path, *, runtime_only: bool = False) -> set[str]:
    """Modules a file imports (`from a.b import c` gives a.b and a.b.c); relative imports are not used here."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in _walk_runtime(tree) if runtime_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
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


INTERFACES = ("worker", "views", "app/api")
AREAS = sorted(path.parent.name for path in (ROOT / "app").glob("*/models.py"))
MODELS = re.compile(r"^app\.(\w+\.)?models(\.|$)")


def _sql_imports(folder: str) -> list[str]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for name in sorted(_imports(path, runtime_only=True)):
            if name == "sqlalchemy" or name.startswith("sqlalchemy.") or MODELS.match(name):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def test_the_interfaces_build_no_sql_and_hold_no_models() -> None:
    """worker/, views/ and app/api/ call the areas' queries and services; a row type may appear in annotations."""
    assert [line for folder in INTERFACES for line in _sql_imports(folder)] == []


def test_the_rule_sees_every_spelling_of_an_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "import sqlalchemy\n"
        "from sqlalchemy.orm import aliased\n"
        "from app.jobs.models import Job\n"
        "from app.jobs import models\n"
        "if TYPE_CHECKING:\n"
        "    from app.advice.models import Advice\n"
        "def f():\n"
        "    from app.evidence.models import Anomaly\n"
    )
    found = {
        name for name in _imports(sample, runtime_only=True) if name.startswith("sqlalchemy") or MODELS.match(name)
    }
    assert found == {
        "sqlalchemy",
        "sqlalchemy.orm",
        "sqlalchemy.orm.aliased",
        "app.jobs.models",
        "app.jobs.models.Job",
        "app.evidence.models",
        "app.evidence.models.Anomaly",
    }
    assert "app.advice.models" not in found


def test_every_area_has_the_same_file_names() -> None:
    """Each area owns its tables: models.py (ORM), service.py (writes) and queries.py (reads)."""
    assert {"advice", "audit", "evidence", "feed", "jobs", "leases"} <= set(AREAS)
    for area in AREAS:
        for name in ("models.py", "service.py", "queries.py"):
            assert (ROOT / "app" / area / name).is_file(), f"app/{area}/{name}"


def test_the_jobs_area_reads_no_advice_or_evidence_table() -> None:
    problems = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "app" / "jobs").glob("*.py"))
        for name in _imports(path)
        if name.startswith(("app.advice.models", "app.evidence.models"))
    ]
    assert problems == []


def _async_functions(path: Path) -> list[ast.AsyncFunctionDef]:
    return [node for node in ast.parse(path.read_text()).body if isinstance(node, ast.AsyncFunctionDef)]


def test_area_services_and_queries_take_keyword_arguments_and_say_what_they_do() -> None:
    """Public async functions of service.py/queries.py: the session (or session factory) first, then keywords only."""
    problems = []
    for area in AREAS:
        for name in ("service.py", "queries.py"):
            path = ROOT / "app" / area / name
            for fn in _async_functions(path):
                if fn.name.startswith("_"):
                    continue
                where = f"app/{area}/{name}:{fn.name}"
                positional = [a.arg for a in fn.args.posonlyargs + fn.args.args]
                if positional not in (["session"], ["sessions"]):
                    problems.append(f"{where} takes {positional} positionally")
                doc = ast.get_docstring(fn)
                if not doc:
                    problems.append(f"{where} has no docstring")
    assert problems == []


def test_tests_import_no_conftest_and_no_other_test_module() -> None:
    """Shared test code lives in helper modules (factories, helpers); conftest files only register fixtures."""
    problems = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for name in _imports(path)
        if name.startswith("tests.")
        and (name.split(".")[-1] == "conftest" or name.split(".")[-1].startswith("test_") or ".conftest." in name)
    ]
    assert problems == []


def test_app_holds_entry_points_and_packages_and_the_domain_only_groups() -> None:
    """Flat in app/: the entry points only; app/domain: concept groups only (no flat module to grow back)."""
    flat = sorted(p.name for p in (ROOT / "app").glob("*.py"))
    assert flat == ["__init__.py", "cli.py", "client.py", "demo.py", "main.py"]
    assert sorted(p.name for p in (ROOT / "app" / "domain").glob("*.py")) == ["__init__.py"]
    groups = sorted(p.parent.name for p in (ROOT / "app" / "domain").glob("*/__init__.py"))
    assert groups == ["admission", "control", "decision", "detection", "edge", "fleetwide", "presentation"]
