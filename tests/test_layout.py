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


# ---- every row write in its area's service --------------------------------------------------

WRITERS = {ROOT / "app" / area / "service.py" for area in AREAS}
PRODUCTION = ("app", "views", "worker")
_DML = {"insert", "update", "delete"}
_SESSION_WRITES = {"add", "add_all", "delete", "merge"}


def _mapped_models() -> dict[str, set[str]]:
    """Mapped class name -> its mapped attribute names (columns and relationships), from the ORM registry."""
    import app.infra.all_models  # noqa: F401  (every model registered)
    from app.infra.db import Base

    return {mapper.class_.__name__: {attr.key for attr in mapper.attrs} for mapper in Base.registry.mappers}


def test_every_mapped_class_lives_in_an_area_models_module() -> None:
    """So `self` in a class defined anywhere else is never a row (the write rule below relies on it)."""
    import app.infra.all_models  # noqa: F401
    from app.infra.db import Base

    modules = {mapper.class_.__module__ for mapper in Base.registry.mappers}
    assert {m for m in modules if not re.fullmatch(r"app\.\w+\.models", m)} == set()


class _RowWrites(ast.NodeVisitor):
    """Column writes (`x.col = …`, `x.col += …`, `del x.col`, `setattr(x, "col", …)`) and DML on a model.

    An attribute is a column when its name is that of a mapped attribute of any model; its object is a
    row unless it is the `self` of a method of a class that is not mapped (mapped classes live only in
    models.py, checked above) or a parameter annotated `type[…]` (a class, never a row).
    A `setattr` whose name cannot be read as a string constant counts.
    """

    def __init__(self, columns: set[str], models: set[str], constants: dict[str, str]) -> None:
        self.columns, self.models, self.constants = columns, models, constants
        self.found: list[tuple[int, str]] = []
        self._own: list[str | None] = [None]  # the `self` name of the method being walked (None: not a method)
        self._in_class: list[str | None] = [None]
        self._classes: list[set[str]] = [set()]  # parameters annotated `type[…]` in the functions being walked

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._in_class.append(node.name)
        self.generic_visit(node)
        self._in_class.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        own = self._own[-1]
        cls = self._in_class[-1]
        if cls is not None:  # a method: its first argument is an instance of the class
            args = node.args.posonlyargs + node.args.args
            own = args[0].arg if args and cls not in self.models else None
        arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        typed = {a.arg for a in arguments if a.annotation is not None and ast.unparse(a.annotation).startswith("type[")}
        self._own.append(own)
        self._in_class.append(None)
        self._classes.append(self._classes[-1] | typed)
        self.generic_visit(node)
        self._classes.pop()
        self._in_class.pop()
        self._own.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def _is_row(self, target: ast.expr) -> bool:
        return not (isinstance(target, ast.Name) and (target.id == self._own[-1] or target.id in self._classes[-1]))

    def _targets(self, targets: list[ast.expr], line: int) -> None:
        for target in targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                self._targets(list(target.elts), line)
            elif isinstance(target, ast.Starred):
                self._targets([target.value], line)
            elif isinstance(target, ast.Attribute) and target.attr in self.columns and self._is_row(target.value):
                self.found.append((line, ast.unparse(target)))

    def visit_Assign(self, node: ast.Assign) -> None:
        self._targets(node.targets, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets([node.target], node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets([node.target], node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._targets(node.targets, node.lineno)
        self.generic_visit(node)

    def _name_of(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return self.constants.get(node.id)
        return None

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        text = ast.unparse(func)
        if text in ("setattr", "object.__setattr__") and len(node.args) >= 2 and self._is_row(node.args[0]):
            name = self._name_of(node.args[1])
            if name is None or name in self.columns:
                self.found.append((node.lineno, ast.unparse(node)[:80]))
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called in _DML and node.args and ast.unparse(node.args[0]).split(".")[0] in self.models:
            self.found.append((node.lineno, ast.unparse(node)[:80]))
        if isinstance(func, ast.Attribute) and func.attr in _DML and text.split(".")[0] in self.models:
            self.found.append((node.lineno, text))  # Model.__table__.update()
        if called in _SESSION_WRITES and isinstance(func, ast.Attribute) and text.endswith("session." + called):
            self.found.append((node.lineno, ast.unparse(node)[:80]))
        if called == "insert_rows":  # app/infra/sql.py's bulk insert: a service names the table and the rows
            self.found.append((node.lineno, ast.unparse(node)[:80]))
        self.generic_visit(node)


def _module_constants(tree: ast.Module) -> dict[str, str]:
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _row_writes(path: Path, models: dict[str, set[str]]) -> list[str]:
    tree = ast.parse(path.read_text())
    columns = set().union(*models.values())
    finder = _RowWrites(columns, set(models), _module_constants(tree))
    finder.visit(tree)
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [f"{where}:{line}: {what}" for line, what in sorted(finder.found)]


def test_every_row_write_is_in_its_area_service() -> None:
    """Only app/<area>/service.py assigns a mapped column, adds or deletes a row, or builds an UPDATE/INSERT/DELETE."""
    models = _mapped_models()
    problems = [
        line
        for folder in PRODUCTION
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path not in WRITERS
        for line in _row_writes(path, models)
    ]
    assert problems == []


def test_the_write_rule_sees_every_spelling_of_a_write(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "NAME = 'offset'\n"
        "class Reader:\n"
        "    def __init__(self, row):\n"
        "        self.offset = 0\n"  # the reader's own attribute: not a row
        "        row.offset = 1\n"
        "        row.offset += 1\n"
        "        a, row.inode = 1, 2\n"
        "        del row.head_digest\n"
        "        setattr(row, 'line_number', 3)\n"
        "        setattr(row, NAME, 3)\n"
        "        setattr(row, name, 3)\n"
        "        setattr(row, 'not_a_column', 3)\n"
        "        object.__setattr__(self, 'offset', 4)\n"
        "async def f(session, row):\n"
        "    self.offset = 5\n"  # outside a method `self` is just a name
        "    row.not_a_column = 6\n"
        "    session.add(row)\n"
        "    await session.execute(update(LogSource).values(offset=0))\n"
        "    await session.execute(postgresql.insert(Anomaly).values())\n"
        "    await insert_rows(session, LogSource, [])\n"
        "    found.add(row)\n"
        "def decorate(cls: type[T], row):\n"
        "    setattr(cls, name, property(read))\n"  # a class built by a decorator: not a row
        "    setattr(row, name, 7)\n"
    )
    found = [line.split(": ", 1)[1] for line in _row_writes(sample, _mapped_models())]
    assert found == [
        "row.offset",
        "row.offset",
        "row.inode",
        "row.head_digest",
        "setattr(row, 'line_number', 3)",
        "setattr(row, NAME, 3)",
        "setattr(row, name, 3)",
        "self.offset",
        "session.add(row)",
        "update(LogSource)",
        "postgresql.insert(Anomaly)",
        "insert_rows(session, LogSource, [])",
        "setattr(row, name, 7)",
    ]


def test_app_holds_entry_points_and_packages_and_the_domain_only_groups() -> None:
    """Flat in app/: the entry points only; app/domain: concept groups only (no flat module to grow back)."""
    flat = sorted(p.name for p in (ROOT / "app").glob("*.py"))
    assert flat == ["__init__.py", "cli.py", "client.py", "demo.py", "main.py"]
    assert sorted(p.name for p in (ROOT / "app" / "domain").glob("*.py")) == ["__init__.py"]
    groups = sorted(p.parent.name for p in (ROOT / "app" / "domain").glob("*/__init__.py"))
    assert groups == ["admission", "control", "decision", "detection", "edge", "fleetwide", "presentation"]
