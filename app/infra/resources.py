"""Finds the top-level data folders (migrations, static, graphql, examples) in a wheel or a source checkout."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ("migrations", "static", "graphql", "examples")


def resource_dir(name: str) -> Path:
    """The folder `name`: packaged under app.bundled in a wheel, else the checkout's top-level folder."""
    if name not in BUNDLED:
        raise ValueError(f"unknown resource folder {name!r}; expected one of {', '.join(BUNDLED)}")
    packaged = Path(str(resources.files("app.bundled").joinpath(name)))
    if packaged.is_dir():
        return packaged
    return SOURCE_ROOT / name
