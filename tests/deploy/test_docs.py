"""The operator-facing docs link to files that exist, so a renamed example or doc breaks a test, not a
reader's trust."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["concepts.md", "scheduling.md", "apply.md", "cli.md", "operations.md", "api.md"]
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\((?!https?://|#|mailto:)(?P<target>[^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("name", DOCS)
def test_relative_links_resolve(name: str) -> None:
    path = ROOT / "docs" / name
    text = CODE.sub("", path.read_text())  # a regex in a code span is not a link
    broken = [m["target"] for m in LINK.finditer(text) if not (path.parent / m["target"]).exists()]
    assert not broken, f"{name} links to missing files: {broken}"
