"""The searches keep parity with the record of the search before issue #40 (tests/fixtures/search_record.json,
tests/search_identity.py): on a slice of the recorded cases, at least 99.5% of sources give the recorded outputs
and every score of an equal output is within 1e-4 of its record."""

from __future__ import annotations

import json
from pathlib import Path

from tests import search_identity

RECORD = Path(__file__).parent.parent / "fixtures" / "search_record.json"


def test_the_searches_keep_parity_with_the_record():
    want = json.loads(RECORD.read_text())
    got = search_identity.compact(json.loads(json.dumps(search_identity.quick_cases())))
    found = search_identity.parity(want, got)
    assert found.sources > 500, found.summary()
    assert found.holds(), "\n".join([found.summary(), *found.differ[:20], *found.far[:20], *found.missing[:5]])


def test_parity_lists_a_changed_output_and_a_moved_score():
    want = {"case": [[[[5, 6], -1.0, -1.0]], [[[7], -2.0, -2.0]]]}
    got = {"case": [[[[5, 6], -1.0, -1.0 + 5e-4]], [[[8], -2.5, -2.5]]]}
    found = search_identity.parity(want, got)
    assert (found.sources, found.equal) == (2, 1)
    assert found.differ == ["case #1: want [7] (-2) got [8] (-2.5)"]
    assert len(found.far) == 1 and not found.holds()
