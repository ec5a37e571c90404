"""What the repository cites is in the repository: no code, test, script or document points a reader at a
document they do not have (an earlier specification by section number, an issue tracker's numbers, the
design notes that stay outside the repository). docs/interface.md keeps one table that decodes old commit
messages; it is the one place allowed to name the old specification."""
from __future__ import annotations

import re
import subprocess

from testbed.paths import REPO

OUTSIDE = re.compile(r"CONTRACT(\.md| section| \d)|\b[Ii]ssues? \d+|DESIGN\.md|STYLE\.md|\.\./shared/")
DECODER = "docs/interface.md"  # its "Section numbers of the old contract" table decodes old commit messages
SELF = "tests/unit/test_references.py"  # the examples below
TEXT = (".py", ".md", ".sh", ".yml", ".yaml", ".toml", ".tpl", ".txt", ".cfg", ".ini", "Makefile", "Dockerfile")


def _tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if f.endswith(TEXT) and not (REPO / f).is_symlink()]


def test_no_file_cites_a_document_outside_the_repository() -> None:
    found = []
    for name in _tracked_text_files():
        path = REPO / name
        if name == SELF or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) and not (name == DECODER and "CONTRACT section N" in line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert found == []


def test_the_pattern_finds_the_citations_it_is_meant_to_find() -> None:
    for cited in ("(CONTRACT section 13)", "CONTRACT 4 and 13", "issue 21 item 2", "see DESIGN.md",
                  "../shared/CONTRACT.md", "Issues 20 and 21"):
        assert OUTSIDE.search(cited), cited
    for fine in ("docs/interface.md#under-hostile-clients", "the contract tests", "tissue 3"):
        assert not OUTSIDE.search(fine), fine
