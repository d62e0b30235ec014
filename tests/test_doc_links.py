"""Every in-repo link of the docs, and every docs/README section the code's messages name, exists (issue 26).

A link's file must exist and its #anchor must be a heading of that file (GitHub's slug) or an explicit id.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)[^`\n]*?\1")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
EXPLICIT_ID = re.compile(r"""<a\s+(?:name|id)=["']([^"']+)["']""")
# What the code's messages name: docs/x.md, docs/x.md#section, README.md#section (README#section).
NAMED = re.compile(r"(docs/[A-Za-z0-9_./-]+\.md|README(?:\.md)?)(#[A-Za-z0-9_-]+)?")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed, spaces as hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a file offers (headings, numbered like GitHub when repeated, and explicit ids)."""
    text = FENCE.sub("", path.read_text())
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found | set(EXPLICIT_ID.findall(text))


def _target(source: Path, link: str) -> tuple[Path, str | None] | None:
    """The file and anchor an in-repo link points at (None for a web or mail link)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", link) or link.startswith("//"):
        return None
    path_part, _, anchor = link.partition("#")
    target = source if not path_part else (source.parent / path_part).resolve()
    return target, anchor or None


def _problem(source: Path, link: str) -> str | None:
    found = _target(source, link)
    if found is None:
        return None
    target, anchor = found
    where = f"{source.relative_to(ROOT)}: {link}"
    if not target.exists():
        return f"{where} (no such file)"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"{where} (no section #{anchor} in {target.relative_to(ROOT)})"
    return None


def test_slug_follows_github() -> None:
    assert slug("What the demo shows") == "what-the-demo-shows"
    assert slug("`recovery status` and REST: a refused job") == "recovery-status-and-rest-a-refused-job"
    assert slug("Several clusters in one installation") == "several-clusters-in-one-installation"


def test_every_in_repo_doc_link_and_anchor_exists() -> None:
    problems: list[str] = []
    checked = 0
    for source in DOCS:
        for link in LINK.findall(INLINE_CODE.sub("", FENCE.sub("", source.read_text()))):
            checked += 1
            problem = _problem(source, link)
            if problem:
                problems.append(problem)
    assert checked > 80  # the scan read the docs' links (not an empty pass)
    assert problems == [], "\n".join(problems)


def test_every_docs_section_the_code_names_exists() -> None:
    problems: list[str] = []
    named = 0
    for folder in ("app", "worker", "views"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".html", ".sh", ".js") or not path.is_file():
                continue
            for doc, anchor in NAMED.findall(path.read_text()):
                named += 1
                target = ROOT / ("README.md" if doc.startswith("README") else doc)
                where = f"{path.relative_to(ROOT)} names {doc}{anchor}"
                if not target.exists():
                    problems.append(f"{where} (no such file)")
                elif anchor and anchor[1:] not in anchors(target):
                    problems.append(f"{where} (no such section)")
    assert named > 20
    assert problems == [], "\n".join(problems)


def test_the_operator_guide_takes_its_capacity_figures_from_the_readme() -> None:
    """One source for measured figures: the operator guide's Capacity section points to the README's table."""
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    section = guide.split("## Capacity", 1)[1].split("What this means:", 1)[0]
    assert "../README.md#benchmarks" in section
    figures = re.findall(r"\d[\d,.]*\s*(?:ms|MB|MB/s|s|×)\b", section)
    assert figures == [], f"figures that may contradict the README's benchmark table: {figures}"
