"""tree_beam's own defaults (the paper's beam 21 and alpha 0.3, room for a linearized tree) within the core's bounds,
and its length limits as validation's greedy search reads them."""

import pytest
from seqxduce_parsing.settings import TreeBeamSettings

from seqxduce.api import UserError
from seqxduce.search_settings import SearchSettings


def test_tree_beams_defaults_and_bounds():
    tree = TreeBeamSettings()
    assert (tree.beam, tree.alpha, tree.max_len_a, tree.max_len_b) == (21, 0.3, 1.0, 300)
    with pytest.raises(UserError, match=r"^TreeBeamSettings\.beam = 0 is out of range; use a number >= 1$"):
        TreeBeamSettings(beam=0)


def test_validation_greedy_takes_tree_beams_length_limits():
    tree = TreeBeamSettings(max_len_a=2.0, min_len=1)
    assert SearchSettings.lengths_of(tree) == SearchSettings(max_len_a=2.0, max_len_b=300, min_len=1)
