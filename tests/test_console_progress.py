"""The training progress bar keeps the bar, the step count and the ETA whole at 80 columns; figures give way."""

import io

import pytest
from rich.console import Console

from seqxduce.console import TrainProgress

FIGURES = {"loss": 2.653, "ppl": 13.4, "lr": 0.1021, "tokens_per_s": 17404.4, "grad_norm": 0.6288,
           "ponder_mean": 3.25}


def rendered(progress: TrainProgress, width: int) -> str:
    """The progress row as a terminal of `width` columns shows it, as plain text."""
    screen = Console(file=io.StringIO(), width=width, record=True, force_terminal=True)
    screen.print(progress.progress.make_tasks_table(progress.progress.tasks))
    return screen.export_text()


def make_progress(step: int, total: int, figures: dict | None) -> TrainProgress:
    progress = TrainProgress(total, 0, out=Console(file=io.StringIO(), width=80))
    progress.update(step, figures)
    return progress


@pytest.mark.parametrize("step, total", [(97, 100000), (4321, 10000), (0, 5)])
def test_bar_steps_and_eta_stay_whole_at_80_columns(step, total):
    line = rendered(make_progress(step, total, FIGURES), 80).rstrip("\n")
    assert "\n" not in line and len(line) <= 80
    assert line.startswith("train ━")
    assert f" {step}/{total} " in line
    assert " eta " in line and "…" not in line
    eta = line.split(" eta ")[1].split()[0]
    assert eta == "-:--:--" or eta.count(":") == 2  # h:mm:ss, never cut
    # the figures that fit are whole, in order; the rest are dropped
    shown = line.split(eta, 1)[1].split()
    names = list(FIGURES)
    assert shown[0::2] == names[: len(shown) // 2] and len(shown) % 2 == 0
    assert 0 < len(shown) // 2 < len(names)


def test_a_wide_terminal_shows_every_figure():
    line = rendered(make_progress(97, 100000, FIGURES), 200)
    for name in FIGURES:
        assert f" {name} " in line
    assert "ponder_mean 3.25" in line


def test_before_any_figure_the_row_is_bar_steps_and_times():
    line = rendered(make_progress(3, 10, None), 80).rstrip()
    assert line.startswith("train ━") and " 3/10 " in line and line.split()[-2] == "eta"


def test_the_bar_shows_only_on_a_terminal_of_the_main_rank():
    assert TrainProgress(10, 0, out=Console(file=io.StringIO(), width=80)).progress.disable
    assert TrainProgress(10, 0, enabled=False, out=Console(file=io.StringIO(), force_terminal=True)).progress.disable
    assert not TrainProgress(10, 0, out=Console(file=io.StringIO(), force_terminal=True)).progress.disable


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_log_lines_eta_follows_the_recent_pace_not_the_whole_runs():
    clock = Clock()
    progress = TrainProgress(10_000, 1_000, enabled=False, clock=clock)  # resumed at step 1,000
    assert progress.eta(1_000) == "?"
    # an hour paused at the start (a SIGSTOPped process, a shared machine), then 1 s a step, logged every 100
    clock.now = 3_600.0
    step = 1_000
    for _ in range(30):
        clock.now += 100.0
        step += 100
        line = progress.eta(step)
    # 3,000 s into the steady pace the window holds only it: 6,000 steps left at 1 s each; the whole run's
    # average (6,600 s for 3,000 steps) would have said 3:40:00
    assert line == "1:40:00"


def test_the_eta_of_a_young_run_is_its_average_so_far():
    clock = Clock()
    progress = TrainProgress(1_000, 0, enabled=False, clock=clock)
    clock.now = 50.0
    assert progress.eta(100) == "0:07:30"  # 0.5 s a step, 900 steps left
    clock.now = 150.0
    assert progress.eta(200) == "0:10:00"  # 0.75 s a step over the 150 s so far, 800 left
