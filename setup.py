"""Build hook: the wheel carries the top-level data folders as app/bundled/<name> (see app/infra/resources.py).

Everything else about the package is declared in pyproject.toml. The source tree keeps its layout
(migrations/, static/, graphql/, examples/ at the top); an editable install reads them from there.
"""

import shutil
from pathlib import Path

from setuptools import setup  # type: ignore[import-untyped]
from setuptools.command.build_py import build_py  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent
BUNDLED = ("migrations", "static", "graphql", "examples")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".keep")


class BuildPyWithData(build_py):
    """build_py that also copies the data folders into the built app/bundled package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "app" / "bundled"
        for name in BUNDLED:
            source = ROOT / name
            if not source.is_dir():
                raise SystemExit(f"build: data folder {name}/ is missing (an sdist needs MANIFEST.in to carry it)")
            shutil.rmtree(target / name, ignore_errors=True)
            shutil.copytree(source, target / name, ignore=SKIP)


setup(cmdclass={"build_py": BuildPyWithData})
