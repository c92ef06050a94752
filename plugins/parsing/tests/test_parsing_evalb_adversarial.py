"""The scorer against the original EVALB on adversarial pairs: what it printed, stored once, byte for byte.

Each pair in fixtures/evalb_adversarial/ beside this file exercises one rule (see the README there); the expected
outputs come from the real program (tools/regenerate_evalb_fixtures.py here), so these tests need no EVALB binary.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from seqxduce_parsing import evalb
from seqxduce_parsing.evalb_read import file_lines

from seqxduce.cli import cli

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "evalb_adversarial"
CASES = sorted(p.stem for p in FIXTURES.glob("*.gold"))


def evaluate(name: str) -> evalb.Evaluation:
    return evalb.score_lines(file_lines((FIXTURES / f"{name}.gold").read_bytes()),
                             file_lines((FIXTURES / f"{name}.test").read_bytes()))


def stored(name: str, variant: str = "") -> tuple[str, str] | None:
    """EVALB's stdout and stderr for one case (variant: '', '.no_error_limit' or '.big_buffers'), if stored."""
    out = FIXTURES / f"{name}{variant}.evalb"
    if not out.is_file():
        return None
    err = (FIXTURES / f"{name}{variant}.stderr").read_bytes()
    return out.read_text(encoding="ascii"), err.decode("utf-8", errors="backslashreplace")


def messages(ev: evalb.Evaluation) -> str:
    return "".join(f"{m}\n" for m in ev.messages)


def summarised(stdout: str) -> bool:
    return "=== Summary ===" in stdout


def test_there_are_enough_cases_each_with_evalbs_output():
    assert len(CASES) >= 40
    for name in CASES:
        assert (FIXTURES / f"{name}.test").is_file() and stored(name) is not None, name


def reference(name: str) -> tuple[str, str] | None:
    """The output to agree with: of EVALB with larger buffers, else without its error limit, else as distributed;
    None where no run of the original gets to a summary."""
    found = stored(name, ".big_buffers") or stored(name, ".no_error_limit") or stored(name)
    return found if found and summarised(found[0]) else None


SUMMARISED = [name for name in CASES if reference(name)]


@pytest.mark.parametrize("name", SUMMARISED)
def test_the_scorer_prints_what_evalb_prints(name):
    ev = evaluate(name)
    out, err = reference(name)
    assert evalb.format_report(ev.scores) == out
    assert messages(ev) == err


@pytest.mark.parametrize("name", [n for n in CASES if not summarised(stored(n)[0]) and not n.startswith("limit_")])
def test_where_evalb_stops_the_scorer_agrees_up_to_there_and_says_where(name):
    ev = evaluate(name)
    out, err = stored(name)
    stop = int(err.splitlines()[-1].split(" : ")[0])
    assert ev.stop_line == stop
    assert evalb.format_table(ev.scores[:stop - 1]) == out  # the rows the original printed before stopping
    # the original repeats 'Reading sentence' until it gives up; the scorer says it once
    lines = err.splitlines()
    once = [line for i, line in enumerate(lines) if i == 0 or line != lines[i - 1]]
    assert [str(m) for m in ev.messages[:len(once)]] == once
    if stored(name, ".no_error_limit") is None:  # no run of the original ends: the unreadable line is an error
        assert ev.scores[stop - 1].status == evalb.ERROR


@pytest.mark.parametrize("name, limit", [("limit_201_words", "more than 200 words"),
                                         ("limit_201_brackets", "more than 200 brackets"),
                                         ("limit_long_line", "a line of more than 4999 bytes")])
def test_lines_beyond_evalbs_buffers_are_named(name, limit):
    assert evaluate(name).beyond_limits == {1: [limit]}
    assert stored(name, ".big_buffers") is not None


def test_where_evalb_prints_a_summary_the_scorer_does_not_say_it_stops():
    for name in CASES:
        if summarised(stored(name)[0]):
            assert evaluate(name).stop_line is None, name
    assert len(SUMMARISED) >= 40


@pytest.mark.parametrize("name, code", [("punct_dropped_in_test", 0), ("punct_tagged_nn_in_test", 3),
                                        ("latin1_bytes", 0), ("test_is_a_bare_word", 3), ("fewer_test_lines", 3),
                                        ("trailing_blank_line_in_gold", 0)])
def test_the_evaluate_command_prints_evalbs_output_first(name, code):
    result = CliRunner().invoke(cli, ["evaluate", str(FIXTURES / f"{name}.test"), str(FIXTURES / f"{name}.gold"),
                                      "--task", "ptb"])
    assert result.exit_code == code, result.output
    expected = (stored(name, ".no_error_limit") or stored(name))[0]
    assert result.stdout.startswith(expected)
    assert ("warning:" in result.stderr) == (code != 0)
