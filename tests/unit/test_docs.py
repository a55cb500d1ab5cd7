"""The project's own documentation stays true: every module it names exists and every link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PACKAGE = ROOT / "edgelet"

# `edgelet/x.py`, `edgelet/pkg/`, `pkg/module.py`: a path inside the package, in backticks.
CODE_PATH = re.compile(r"`((?:edgelet/)?[a-z_]+(?:/[a-z_]+)*(?:\.py|/))`")
MD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _named_paths(text: str) -> list[str]:
    found = []
    for raw in CODE_PATH.findall(text):
        path = raw.removeprefix("edgelet/")
        if (PACKAGE / path.split("/")[0]).exists() or (PACKAGE / path).exists() or raw.startswith("edgelet/"):
            found.append(path)
    return found


def test_the_docs_exist_and_readme_links_them() -> None:
    names = {p.name for p in DOCS}
    assert {"architecture.md", "kubelet-differences.md"} <= names
    readme = (ROOT / "README.md").read_text()
    assert "docs/architecture.md" in readme
    assert "docs/kubelet-differences.md" in readme


def test_readme_and_docs_point_at_nothing_outside_the_repository() -> None:
    # A user who clones the repository has no ../shared: the design notes live in docs/.
    for page in [ROOT / "README.md", *DOCS]:
        assert "../shared" not in page.read_text(), page


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_module_a_page_names_exists(page: Path) -> None:
    missing = [p for p in _named_paths(page.read_text()) if not (PACKAGE / p).exists()]
    assert not missing, f"{page.name} names modules that do not exist: {missing}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in MD_LINK.findall(page.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (page.parent / target).exists():
            broken.append(target)
    assert not broken, f"{page.name} links to missing files: {broken}"
