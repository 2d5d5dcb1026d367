"""Figures the docs write by hand agree with the report they come from (bench/results/learning/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_hand_made_sentence_quotes_the_reported_recipes_own_report() -> None:
    """docs/learning.md's hand-made websites sentence gives the reported recipe's own handmade row (BC, RL, gain and
    its 95% interval), not another recipe's."""
    text = (ROOT / "docs" / "learning.md").read_text()
    recipe = re.search(r"The reported recipe is \*\*`([\w.-]+)`\*\*", text).group(1)
    report = (ROOT / "bench" / "results" / "learning" / recipe / "README.md").read_text()
    bc, rl, gain, interval = re.search(r"^\| handmade \| \d+ \| ([\d.]+%) \| ([\d.]+%) \| ([+-][\d.]+) \| (\[[^\]]+\]) \|",
                                       report, flags=re.M).groups()
    section = text[text.index("## The hand-made websites"):]
    section = " ".join(section[:section.index("\n## ", 1)].split())
    assert f"BC {bc} -> RL {rl}, {gain} {interval}" in section, (recipe, section[:400])
