"""The README stays a five-minute read whose links lead somewhere: at most 2,000 words (as `wc -w` counts
them), and every relative link names a file of the repository and, with an anchor, a heading of that file."""

from __future__ import annotations

import re

from ltx_tdp_devkit.paths import PACK_ROOT

README_WORD_LIMIT = 2000
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped except '-', spaces to '-'."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_the_readme_is_at_most_2000_words():
    words = len((PACK_ROOT / "README.md").read_text().split())
    assert words <= README_WORD_LIMIT, f"README.md has {words} words; the limit is {README_WORD_LIMIT}"


def test_every_relative_link_of_the_readme_leads_to_a_file_and_heading_that_exist():
    text = (PACK_ROOT / "README.md").read_text()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path, _, anchor = target.partition("#")
        file = PACK_ROOT / path if path else PACK_ROOT / "README.md"
        if not file.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {path or 'README.md'}")
    assert not broken, "broken README links:\n" + "\n".join(broken)
