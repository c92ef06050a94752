"""The CPUs a process may use (seqxduce.cpus) from fake cgroup files and affinity, torch's threads fitted to them,
and the device each torchrun rank takes (seqxduce.device.device_for)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqxduce.api import UserError
from seqxduce.cpus import CpuShare, cgroup_quota, cpu_share, threads_for
from seqxduce.torchrun import omp_default_of_torchrun


def _v2(tmp_path: Path, cpu_max: str | None, group: str = "/", parent_max: str | None = None) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    folder = root / group.strip("/")
    folder.mkdir(parents=True, exist_ok=True)
    if cpu_max is not None:
        (folder / "cpu.max").write_text(cpu_max + "\n")
    if parent_max is not None:
        (folder.parent / "cpu.max").write_text(parent_max + "\n")
    own = tmp_path / "self_cgroup"
    own.write_text(f"0::{group}\n")
    return root, own


def _v1(tmp_path: Path, quota: int, period: int = 100_000, mount: str = "cpu,cpuacct") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    folder = root / mount
    folder.mkdir(parents=True)
    (folder / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (folder / "cpu.cfs_period_us").write_text(f"{period}\n")
    own = tmp_path / "self_cgroup"
    # a container's view: the group's path names the host's hierarchy, the mount is the container's own group
    own.write_text(f"5:memory:/docker/abc\n4:{mount}:/docker/abc\n0::/\n")
    return root, own


def test_cgroup_v2_quota_rounds_up_and_binds_below_affinity(tmp_path):
    root, own = _v2(tmp_path, "150000 100000")
    share = cpu_share(affinity=16, visible=16, cgroup_root=root, self_cgroup=own)
    assert share == CpuShare(2, 16, "cgroup cpu.max", 1.5)
    assert share.describe() == "cgroup cpu.max 1.5 CPUs of 16 visible"


def test_cgroup_v2_max_is_no_limit_and_affinity_decides(tmp_path):
    root, own = _v2(tmp_path, "max 100000")
    share = cpu_share(affinity=4, visible=16, cgroup_root=root, self_cgroup=own)
    assert (share.cpus, share.source) == (4, "CPU affinity")
    assert share.describe() == "CPU affinity 4 of 16 visible"
    assert cpu_share(affinity=8, visible=8, cgroup_root=root, self_cgroup=own).describe() == "all 8 CPUs"


def test_cgroup_v2_a_parents_limit_binds_its_child(tmp_path):
    root, own = _v2(tmp_path, "max 100000", group="/job/step", parent_max="200000 100000")
    assert cgroup_quota(root, own) == (2.0, "cgroup cpu.max")


def test_a_quota_above_the_affinity_leaves_the_affinity(tmp_path):
    root, own = _v2(tmp_path, "800000 100000")
    assert cpu_share(affinity=2, visible=16, cgroup_root=root, self_cgroup=own).cpus == 2


def test_cgroup_v1_quota_in_a_container(tmp_path):
    root, own = _v1(tmp_path, quota=300_000, period=100_000)
    share = cpu_share(affinity=32, visible=32, cgroup_root=root, self_cgroup=own)
    assert share == CpuShare(3, 32, "cgroup cpu.cfs_quota_us", 3.0)


def test_cgroup_v1_no_quota(tmp_path):
    root, own = _v1(tmp_path, quota=-1)
    assert cgroup_quota(root, own) == (None, "")
    assert cpu_share(affinity=2, visible=2, cgroup_root=root, self_cgroup=own).cpus == 2


def test_a_tiny_quota_is_still_one_cpu(tmp_path):
    root, own = _v2(tmp_path, "10000 100000")
    assert cpu_share(affinity=8, visible=8, cgroup_root=root, self_cgroup=own).cpus == 1


def test_no_cgroup_files_at_all(tmp_path):
    assert cgroup_quota(tmp_path / "none", tmp_path / "no_self") == (None, "")
    assert cpu_share(affinity=3, visible=3, cgroup_root=tmp_path / "none", self_cgroup=tmp_path / "x").cpus == 3


def test_threads_follow_the_share_unless_the_user_set_them():
    share = CpuShare(2, 16, "cgroup cpu.max", 2.0)
    assert threads_for(share, {}) == (2, "cgroup cpu.max 2.0 CPUs of 16 visible")
    assert threads_for(share, {"OMP_NUM_THREADS": "4"}) == (4, "OMP_NUM_THREADS")
    assert threads_for(share, {"OMP_NUM_THREADS": "4"}, given=(3, "--threads")) == (3, "--threads")


def test_threads_are_divided_among_the_ranks_of_the_node():
    share = CpuShare(8, 8, "all CPUs")
    env = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    assert threads_for(share, env) == (4, "all 8 CPUs, shared by 2 ranks on this node")
    assert threads_for(CpuShare(1, 8, "CPU affinity"), env)[0] == 1  # at least one


def test_torchruns_default_of_one_thread_is_set_aside_and_an_exported_count_obeyed():
    share = CpuShare(32, 32, "all CPUs")
    env = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8", "OMP_NUM_THREADS": "1", "RANK": "0",
           "TORCHELASTIC_RUN_ID": "x"}
    assert threads_for(share, env, torchrun_default=True) == (
        4, "all 32 CPUs, shared by 8 ranks on this node; torchrun's default OMP_NUM_THREADS=1 overridden: export "
           "it to choose")
    assert threads_for(share, env, torchrun_default=False) == (1, "OMP_NUM_THREADS")
    # outside torchrun, or a count other than torchrun's 1, is the user's whatever the launcher held
    assert omp_default_of_torchrun({"OMP_NUM_THREADS": "1"}) is False
    assert omp_default_of_torchrun({**env, "OMP_NUM_THREADS": "2"}) is False


def _train_args(tiny_recipe, out):
    return ["train", str(tiny_recipe), "--out", str(out), "--set", "train.max_steps=2", "--set",
            "train.validate_every=0", "--set", "train.log_every=1", "--set", "train.checkpoint_every=2"]


def test_train_says_its_threads_first(tmp_path, monkeypatch):
    """The first line of a training's log says how many threads and why; OMP_NUM_THREADS is respected."""
    import torch
    from click.testing import CliRunner

    from seqxduce.cli import cli
    from tests.tiny import TINY_RECIPE

    threads = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        result = CliRunner().invoke(cli, _train_args(TINY_RECIPE, tmp_path / "a"))
        assert result.exit_code == 0, result.output
        first = result.output.splitlines()[0]
        expected = cpu_share()
        assert first == f"threads: {expected.cpus} ({expected.describe()})"
        assert torch.get_num_threads() == expected.cpus

        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        result = CliRunner().invoke(cli, _train_args(TINY_RECIPE, tmp_path / "b"))
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[0] == "threads: 1 (OMP_NUM_THREADS)"
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_a_refusal_comes_alone_without_the_threads_line(tmp_path):
    """The threads line waits for the command's first line of its own: a refusal before any stays one line, and
    the next command in the same process says its threads once."""
    from click.testing import CliRunner

    from seqxduce.cli import cli
    from tests.tiny import TINY_RECIPE

    refused = CliRunner().invoke(cli, ["decode", str(tmp_path / "nothing"), "--input", str(TINY_RECIPE)])
    assert refused.exit_code == 1 and len(refused.output.strip().splitlines()) == 1, refused.output
    assert "threads:" not in refused.output
    trained = CliRunner().invoke(cli, _train_args(TINY_RECIPE, tmp_path / "run"))
    assert trained.exit_code == 0, trained.output
    assert trained.output.count("threads: ") == 1 and trained.output.startswith("threads: ")


@pytest.mark.parametrize(("setting", "cuda", "count", "local_rank", "expected"), [
    ("cpu", True, 4, 1, "cpu"),
    ("auto", False, 0, 1, "cpu"),
    ("auto", True, 4, None, "cuda"),  # one process: torch's current device, as before
    ("cuda", True, 4, None, "cuda"),
    ("cuda:1", True, 4, None, "cuda:1"),
    ("auto", True, 4, 3, "cuda:3"),  # under torchrun: the rank's own GPU
    ("cuda", True, 2, 0, "cuda:0"),
    ("cuda", True, 2, 1, "cuda:1"),
])
def test_each_torchrun_rank_takes_its_own_gpu(setting, cuda, count, local_rank, expected):
    from seqxduce.device import device_for

    assert device_for(setting, cuda, count, local_rank) == expected


def test_more_ranks_than_gpus_or_no_gpu_is_refused_in_one_line():
    from seqxduce.device import device_for

    with pytest.raises(UserError, match=r"LOCAL_RANK 2 but this node shows 2 CUDA device\(s\); start at most 2 "
                                        r"processes per node \(torchrun --nproc_per_node 2\)"):
        device_for("cuda", True, 2, 2)
    with pytest.raises(UserError, match="no CUDA device is visible"):
        device_for("cuda", False, 0, 0)


def test_the_local_rank_is_read_only_under_torchrun():
    from seqxduce.device import torchrun_local_rank

    assert torchrun_local_rank({"LOCAL_RANK": "1", "WORLD_SIZE": "2"}) == 1
    assert torchrun_local_rank({"LOCAL_RANK": "1"}) is None
    assert torchrun_local_rank({}) is None
