"""How a run starts (seqxduce.run_start.RunStart): made and checked once, contradictions refused in one line, and
--auto-resume's choice between starting and continuing."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqxduce.api import UserError
from seqxduce.run_start import RunStart


@pytest.mark.parametrize("flags, words", [
    ({"resume": True, "overwrite": True}, "--resume (continue the run) or --overwrite"),
    ({"auto_resume": True, "overwrite": True}, "--auto-resume (continue the run, or start it) or --overwrite"),
    ({"resume": True, "auto_resume": True}, "--resume (continue a run"),
    ({"resume": True, "init_from": "run"}, "--init-from starts a new run"),
    ({"resume": True, "tokenizers_from": "run"}, "leave out --tokenizers-from"),
    ({"init_from": "a", "tokenizers_from": "b"}, "--init-from takes the tokenizer files"),
    ({"keep_optimizer": True}, "--keep-optimizer keeps the optimizer of --init-from"),
])
def test_contradictions_are_refused_in_one_line_where_the_start_is_made(flags, words):
    with pytest.raises(UserError, match="^train: ") as refused:
        RunStart.from_flags(**flags)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_the_same_check_holds_however_the_value_is_made():
    with pytest.raises(UserError, match="not both"):
        RunStart("resume", overwrite=True)
    with pytest.raises(ValueError, match="none of"):
        RunStart("restart")  # type: ignore[arg-type]
    assert RunStart(init_from="x").init_from == Path("x")  # a str from the Python API is a path


def test_auto_is_resolved_against_the_run_directory_and_nothing_else():
    auto = RunStart.from_flags(auto_resume=True, init_from="base", keep_optimizer=True)
    assert auto.resolved(has_checkpoint=True, has_leftovers=True) == RunStart("resume")  # its own weights go on
    assert auto.resolved(has_checkpoint=False, has_leftovers=False) == \
        RunStart("new", init_from=Path("base"), keep_optimizer=True)
    # an earlier attempt of the same run that saved no step: its leftovers are replaced
    assert RunStart("auto").resolved(has_checkpoint=False, has_leftovers=True) == RunStart("new", overwrite=True)
    assert RunStart("resume").resolved(has_checkpoint=False, has_leftovers=False) == RunStart("resume")
    with pytest.raises(ValueError, match="resolved"):
        _ = RunStart("auto").resume
