"""docs/cluster.md's plain torchrun script, run as written on one machine: it prepares the data once and trains the
run an uninterrupted two-rank run trains. The SLURM script is run by a real SLURM in tests/faults/test_slurm.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.fault_tools import HANG_GUARD_S, REPO
from tests.faults.cluster_tools import equal, launcher_env, short_recipe_file, weights
from tests.faults.slurm import rendezvous_port


def _scripts() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (REPO / "docs" / "cluster.md").read_text(), re.S)


def test_the_plain_torchrun_script_prepares_once_and_trains_the_same_run(tmp_path, two_rank_run):
    script = tmp_path / "train.sh"
    script.write_text(_scripts()[1])
    environment = {**launcher_env(), "PATH": f"{Path(sys.executable).parent}:{launcher_env()['PATH']}",
                   "NPROC": "2", "RDZV_PORT": str(rendezvous_port()), "RECIPE": str(short_recipe_file(tmp_path)),
                   "RUN": str(tmp_path / "run"), "SEQXDUCE_CACHE": str(tmp_path / "cache")}
    log = tmp_path / "job.log"
    job = subprocess.Popen(["bash", str(script)], stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=REPO,
                           env=environment)
    assert job.wait(timeout=HANG_GUARD_S) == 0, log.read_text()
    assert equal(weights(tmp_path / "run"), weights(two_rank_run))
    assert len([p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]) == 1
