"""bf16 asked of a CPU without bf16 units (device.emulated_bf16): training says so in one line naming the fix; a
bf16 run decoded at [decode] precision "recipe" computes in fp32 there and says so; an explicit bf16 is kept. The
CPU's answer is simulated both ways, so the tests hold on a CPU with bf16 units and on one without."""

import pytest
import torch
from click.testing import CliRunner

from seqxduce import device as device_module
from seqxduce.cli import cli
from seqxduce.decoding.changes import flag_changes
from seqxduce.decoding.decode import decode_sources, load_run, plan_run
from seqxduce.decoding.options import decode_precision
from tests.tiny import TINY_RECIPE

WARNING = 'precision = "bf16" on a CPU without bf16 units'
NOTE = "decoding in fp32, not the run's bf16"


def cpu_units(monkeypatch, present: bool) -> None:
    monkeypatch.setattr(device_module, "cpu_has_bf16_units", lambda: present)


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    """The tiny recipe trained in bf16 (the CPU's own answer, whatever it is: the decode tests simulate theirs)."""
    out = tmp_path_factory.mktemp("bf16") / "run"
    result = CliRunner().invoke(cli, ["train", str(TINY_RECIPE), "--out", str(out), "--set", "train.precision=bf16",
                                      "--set", "train.max_steps=4", "--set", "train.average_last=2",
                                      "--set", "train.checkpoint_every=2"])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize(("avx512_bf16", "amx", "expected"), [(False, False, False), (True, False, True),
                                                              (False, True, True), (True, True, True)])
def test_the_cpu_has_bf16_units_when_torch_reports_either_kind(monkeypatch, avx512_bf16, amx, expected):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    assert device_module.cpu_has_bf16_units() is expected
    assert device_module.emulated_bf16(torch.device("cpu"), "bf16") is not expected
    assert not device_module.emulated_bf16(torch.device("cpu"), "fp32")  # fp32 is never emulated
    assert not device_module.emulated_bf16(torch.device("meta"), "bf16")  # only a CPU's bf16 is judged here


def test_a_torch_that_cannot_tell_counts_as_having_them(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert device_module.cpu_has_bf16_units()


@pytest.mark.parametrize("present", [False, True])
def test_training_in_bf16_on_a_cpu_without_units_says_so_and_the_fix(monkeypatch, tmp_path, present):
    cpu_units(monkeypatch, present)
    result = CliRunner().invoke(cli, ["train", str(TINY_RECIPE), "--out", str(tmp_path / "run"),
                                      "--set", "train.precision=bf16", "--set", "train.max_steps=1"])
    assert result.exit_code == 0, result.output
    said = [line for line in result.output.splitlines() if WARNING in line]
    if present:
        assert not said, result.output
    else:
        assert len(said) == 1 and "--set train.precision=fp32" in said[0], result.output


def test_fp32_training_says_nothing_on_a_cpu_without_units(monkeypatch, tmp_path):
    cpu_units(monkeypatch, False)
    result = CliRunner().invoke(cli, ["train", str(TINY_RECIPE), "--out", str(tmp_path / "run"),
                                      "--set", "train.max_steps=1"])
    assert result.exit_code == 0 and WARNING not in result.output, result.output


def test_a_bf16_run_decodes_in_fp32_on_a_cpu_without_units_as_fp32_decodes_it(monkeypatch, bf16_run):
    cpu_units(monkeypatch, False)
    fitted = load_run(bf16_run, ["train.device=cpu"])
    assert decode_precision(fitted.recipe) == "fp32"
    asked = load_run(bf16_run, ["train.device=cpu"], changes=flag_changes(precision="fp32"))
    sources = ["3 1 4 1 5", "2 7 1", "9 2 6 5 3 5"]
    assert [o.text for o in decode_sources(fitted, sources)] == [o.text for o in decode_sources(asked, sources)]
    # the plan says it too, so that a resumed file's record keys the precision its bits come from
    assert decode_precision(plan_run(bf16_run, ["train.device=cpu"]).recipe) == "fp32"


def test_an_explicit_bf16_is_kept_and_a_cpu_with_units_keeps_the_runs(monkeypatch, bf16_run):
    cpu_units(monkeypatch, False)
    asked = load_run(bf16_run, ["train.device=cpu"], changes=flag_changes(precision="bf16"))
    assert decode_precision(asked.recipe) == "bf16"
    cpu_units(monkeypatch, True)
    assert decode_precision(load_run(bf16_run, ["train.device=cpu"]).recipe) == "bf16"


@pytest.mark.parametrize("present", [False, True])
def test_decode_says_once_when_it_decodes_in_fp32(monkeypatch, bf16_run, present):
    cpu_units(monkeypatch, present)
    result = CliRunner().invoke(cli, ["decode", str(bf16_run), "--input", "-", "--device", "cpu"],
                                input="3 1 4\n2 7\n")
    assert result.exit_code == 0, result.output
    assert result.output.count(NOTE) == (0 if present else 1), result.output
    explicit = CliRunner().invoke(cli, ["decode", str(bf16_run), "--input", "-", "--device", "cpu",
                                        "--precision", "bf16"], input="3 1 4\n")
    assert explicit.exit_code == 0 and NOTE not in explicit.output, explicit.output
