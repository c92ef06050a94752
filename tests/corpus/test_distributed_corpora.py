"""Two torchrun ranks train what one process does across corpora (issue #77): the tiny two-pair recipe with
language tags, trained by `torchrun --standalone --nproc-per-node 2 -m seqxduce train` (each rank one batch a
step) and by one `seqxduce train` with the same global batch (update_freq 2), ends with the same parameters; the
training data are prepared once, each corpus binarized once into the one prepared-KEY dataset every process maps."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from seqxduce.corpus import binarized
from tests.fault_tools import HANG_GUARD_S, run
from tests.faults.cluster_tools import torchrun, weights

WORDS = {"cat": ("Katze", "chat"), "dog": ("Hund", "chien"), "red": ("rot", "rouge"), "big": ("gross", "grand"),
         "house": ("Haus", "maison"), "tree": ("Baum", "arbre"), "sees": ("sieht", "voit"), "a": ("ein", "un")}

# the two-pair recipe of plugins/translation/tests/test_multilingual.py, without dropout (the ranks' and the one
# process's masks would differ) and with test_distributed.py's larger Adam eps (rounding noise of gradients that
# are zero in exact arithmetic is not blown up into updates)
RECIPE = """
[task]
name = "translation"
dataset = "files"
data_dir = "data"
lang_tag = "source"
max_ratio = 0

[[task.corpus]]
src_lang = "en"
tgt_lang = "de"

[[task.corpus]]
src_lang = "en"
tgt_lang = "fr"
weight = 2

[tokenizer]
name = "sentencepiece"
vocab_size = 60

[model]
name = "transformer"
layers = 1
d_model = 16
d_ff = 32
heads = 2
dropout = 0.0

[train]
device = "cpu"
max_tokens = 120
max_steps = 8
warmup_steps = 4
eps = 1e-3
log_every = 2
validate_every = 0
valid_decode_examples = 0
checkpoint_every = 4
sampling_temperature = 2.0
collective_timeout = 60
"""


def write_data(folder: Path, sizes: dict[str, int]) -> None:
    """Tiny parallel text: en -> de and en -> fr word for word, per split."""
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in sizes.items():
        lines: dict[str, list[str]] = {"en": [], "de": [], "fr": []}
        for _ in range(n):
            sentence = [rng.choice(list(WORDS)) for _ in range(rng.randint(2, 6))]
            lines["en"].append(" ".join(sentence))
            lines["de"].append(" ".join(WORDS[w][0] for w in sentence))
            lines["fr"].append(" ".join(WORDS[w][1] for w in sentence))
        for lang, text in lines.items():
            (folder / f"{split}.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")


def _datasets(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if binarized.exists(p)) if cache.is_dir() else []


def test_two_ranks_across_corpora_train_what_one_process_does_on_one_prepared_dataset(tmp_path):
    write_data(tmp_path / "data", {"train": 240, "valid": 12, "test": 12})
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE, encoding="utf-8")
    cache = {"SEQXDUCE_CACHE": str(tmp_path / "cache")}

    launcher = torchrun(["train", str(recipe), "--out", str(tmp_path / "ranks")], tmp_path / "ranks.log",
                        extra_env=cache)
    assert launcher.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "ranks.log").read_text()
    log = (tmp_path / "ranks.log").read_text()
    assert "maps its own copy" not in log, log  # both ranks mapped the one dataset rank 0 wrote
    (prepared,) = _datasets(tmp_path / "cache")
    meta = binarized.read_meta(prepared)
    assert prepared.name.startswith("prepared-") and meta["pairs"] == 480
    assert meta["corpora"] == [["en-de", 240], ["en-fr", 240]]  # each corpus binarized once, end to end

    single = run("train", recipe, "--out", tmp_path / "one", "--set", "train.update_freq=2", extra_env=cache)
    assert single.returncode == 0, single.stderr[-3000:]
    assert "prepared already" in single.stderr + single.stdout  # the same dataset, found by its key
    assert _datasets(tmp_path / "cache") == [prepared]

    for step in (4, 8):
        ranks, one = weights(tmp_path / "ranks", step), weights(tmp_path / "one", step)
        assert ranks.keys() == one.keys()
        for name in one:  # the ranks' gradients are summed in another order than one process's: within rounding
            assert torch.allclose(ranks[name], one[name], atol=1e-5, rtol=1e-4), (step, name)
    # training moved the parameters between the two, so the comparison means something
    assert any(not torch.equal(weights(tmp_path / "one", 4)[k], one[k]) for k in one)
    records = [json.loads(line) for line in (tmp_path / "ranks" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r.get("kind") == "train"] == [2, 4, 6, 8]
