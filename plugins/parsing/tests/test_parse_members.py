"""`seqxduce parse` on a run trained with [train] members = 2: it parses with the members' ensemble, as decode does
(at a terminal its first line names the members; over a pipe it writes only the trees)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from nltk.tree import Tree

from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.decode import decode_lines, load_run
from seqxduce.testing import repository_root

RECIPE = repository_root(Path(__file__)) / "recipes" / "ptb_sample.toml"
SETTINGS = ["task.train_files=0001-0004", "task.valid_files=0160", "model.layers=1", "model.d_model=32",
            "model.d_ff=64", "model.heads=2", "train.max_steps=6", "train.max_tokens=1024", "train.warmup_steps=4",
            "train.validate_every=0", "train.checkpoint_every=6", "train.average_last=1", "train.members=2",
            "train.parallel_members=2", "decode.beam=2"]


@pytest.fixture(scope="module")
def two_member_parser(tmp_path_factory, ptb_sample) -> Path:
    out = tmp_path_factory.mktemp("parse_members") / "run"
    args = ["train", str(RECIPE), "--out", str(out)]
    for s in [*SETTINGS, f"task.data_dir={ptb_sample}"]:
        args += ["--set", s]
    result = CliRunner().invoke(add_plugin_commands(), args)
    assert result.exit_code == 0, result.output
    assert (out / "members" / "2").is_dir()
    return out


def test_parse_uses_the_ensemble_of_the_members_and_writes_a_tree_over_the_words(two_member_parser: Path):
    result = CliRunner().invoke(add_plugin_commands(), ["parse", str(two_member_parser), "--flat"],
                                input="The cat sat .\n")
    assert result.exit_code == 0, result.output
    tree = Tree.fromstring(result.stdout.strip().splitlines()[-1])
    assert tree.leaves() == ["The", "cat", "sat", "."]
    loaded = load_run(two_member_parser)
    assert len(loaded.members) == 1  # member 2 beside member 1: decode's ensemble
    assert " ".join(str(tree).split()) == " ".join(decode_lines(loaded, ["The cat sat ."])[0].text.split())
