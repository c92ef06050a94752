"""The core imports the same from anywhere: a checkout in a folder named `seqxduce` (as `git clone` names it)
must not be taken for the package when Python runs from the checkout's parent folder."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "seqxduce"


def test_no_core_module_is_named_like_a_top_level_folder_of_the_checkout():
    # from the parent folder the checkout is a namespace portion of `seqxduce`, so seqxduce.<folder> would
    # resolve to that folder instead of the core module of that name
    folders = {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")}
    modules = {p.stem for p in CORE.glob("*.py")} | {p.name for p in CORE.iterdir() if p.is_dir()}
    assert not folders & modules


def test_the_core_imports_from_the_parent_of_a_checkout_named_seqxduce(tmp_path):
    (tmp_path / "seqxduce").symlink_to(REPO, target_is_directory=True)
    code = ("import seqxduce.decoding.decode, seqxduce.training.trainer, seqxduce.cli, seqxduce.registry, "
            "seqxduce.recipe; "
            "print(seqxduce.registry.__file__)")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert Path(result.stdout.strip()).resolve() == CORE / "registry.py"
