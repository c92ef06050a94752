"""The binarized training data: written and read back exactly, encoded alike on one or several processes,
refused in one line when damaged (and prepared again only when asked), prepared anew when the corpus or the
tokenizer changes, and shared by the ranks of a torchrun world."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from seqxduce.api import Example
from seqxduce.corpus import binarized, prepare
from seqxduce.corpus.arrays import PairArrays, length_batches, token_batches
from seqxduce.data import Pair, encode_pairs
from tests.fault_tools import REPO, command, env
from tests.tiny import TINY_RECIPE as TINY

QUIET = ("--set", "train.validate_every=0", "--set", "train.valid_decode_examples=0", "--set", "train.max_steps=2")


def _random_pairs(n: int, vocab: int, seed: int = 0) -> list[Pair]:
    rng = random.Random(seed)
    return [Pair([rng.randrange(vocab) for _ in range(rng.randint(1, 9))],
                 [rng.randrange(vocab) for _ in range(rng.randint(0, 9))]) for _ in range(n)]


@pytest.mark.parametrize(("vocab", "dtype"), [(200, np.uint8), (8000, np.uint16), (70_000, np.uint32)])
def test_a_dataset_written_in_chunks_reads_back_exactly_in_the_smallest_type(tmp_path, vocab, dtype):
    pairs = _random_pairs(500, vocab)
    with binarized.DatasetWriter(tmp_path / "data", vocab) as writer:
        for a in range(0, len(pairs), 128):
            chunk = PairArrays.from_pairs(pairs[a:a + 128])
            writer.add(chunk.src_ids, chunk.src_lengths, chunk.tgt_ids, chunk.tgt_lengths)
        writer.close()
    read, meta = binarized.open_dataset(tmp_path / "data")
    assert meta["pairs"] == 500 and read.src_ids.dtype == dtype and isinstance(read.src_ids, np.memmap)
    assert list(read) == pairs
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the work folder was renamed


def _reference_batches(pairs, max_tokens, seed, epoch, max_source=None, bucket_width=0):
    """token_batches as it was written before the arrays (80e374f), to compare with."""
    rng = random.Random(seed * 100_003 + epoch)
    order = [i for i, p in enumerate(pairs) if max_source is None or len(p.src) <= max_source]
    rng.shuffle(order)
    if bucket_width > 0:
        order.sort(key=lambda i: (len(pairs[i].src) // bucket_width, len(pairs[i].tgt), len(pairs[i].src)))
    else:
        order.sort(key=lambda i: (len(pairs[i].src), len(pairs[i].tgt)))
    batches, current, longest_src, longest_tgt = [], [], 0, 0
    for i in order:
        s, t = len(pairs[i].src), len(pairs[i].tgt) + 1
        new_src, new_tgt = max(longest_src, s), max(longest_tgt, t)
        if current and (len(current) + 1) * (new_src + new_tgt) > max_tokens:
            batches.append(current)
            current, new_src, new_tgt = [], s, t
        current.append(i)
        longest_src, longest_tgt = new_src, new_tgt
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


@pytest.mark.parametrize(("max_source", "bucket_width"), [(None, 0), (6, 0), (None, 3)])
def test_batches_from_arrays_of_lengths_are_the_batches_of_before(max_source, bucket_width):
    pairs = _random_pairs(3000, 50, seed=3)
    arrays = PairArrays.from_pairs(pairs)
    for epoch in (1, 2):
        want = _reference_batches(pairs, 60, 7, epoch, max_source, bucket_width)
        assert token_batches(pairs, 60, 7, epoch, max_source=max_source, bucket_width=bucket_width) == want
        got = length_batches(arrays.src_lengths, arrays.tgt_lengths, 60, 7, epoch, max_source=max_source,
                             bucket_width=bucket_width)
        assert list(got) == want


class WordLengths:
    """A stand-in tokenizer: each word's length + 3; eos 2."""

    eos_id, vocab_size = 2, 40

    def encode(self, text: str) -> list[int]:
        return [len(w) + 3 for w in text.split()]


def test_several_processes_encode_what_one_encodes_in_corpus_order(tmp_path, monkeypatch):
    rng = random.Random(1)
    words = ["a", "bb", "ccc", "dddd", "eeeee"]
    examples = [Example(" ".join(rng.choices(words, k=rng.randint(0, 8))), " ".join(rng.choices(words, k=3)))
                for _ in range(300)]
    monkeypatch.setattr(prepare, "SHARD", 7)
    monkeypatch.setattr(prepare, "IN_PROCESS", 10)  # a pool of workers even for 300 pairs
    tok = WordLengths()
    tokenizers = type("Tokenizers", (), {"src": tok, "tgt": tok})()
    with binarized.DatasetWriter(tmp_path / "data", tok.vocab_size) as writer:
        dropped = prepare.encode_into(writer, examples, tokenizers, 7, 9, workers=2, show=False)
        writer.close()
    want, skipped = encode_pairs(examples, tok, tok, 7, 9)
    assert dropped == skipped > 0
    assert list(binarized.open_dataset(tmp_path / "data")[0]) == want


def test_encoding_reads_the_corpus_as_a_stream_a_few_shards_ahead_of_the_writer(tmp_path, monkeypatch):
    """The examples come from a generator (Task.stream reading files): the encoding holds at most its window of
    shards, never the corpus."""
    monkeypatch.setattr(prepare, "SHARD", 5)
    monkeypatch.setattr(prepare, "IN_PROCESS", 10)
    read = 0

    def stream():
        nonlocal read
        for i in range(400):
            read += 1
            yield Example(" ".join(["a"] * (i % 6 + 1)), "bb cc")

    ahead = []

    class Watching(binarized.DatasetWriter):
        def add(self, *arrays):
            super().add(*arrays)
            ahead.append(read - self.pairs)  # pairs read from the stream and not yet written

    tok = WordLengths()
    tokenizers = type("Tokenizers", (), {"src": tok, "tgt": tok})()
    with Watching(tmp_path / "data", tok.vocab_size) as writer:
        assert prepare.encode_into(writer, stream(), tokenizers, 50, 50, workers=2, show=False) == 0
        writer.close()
    assert len(ahead) == 80 and max(ahead) <= 2 * 2 * 5  # two shards in flight per worker
    assert list(binarized.open_dataset(tmp_path / "data")[0]) == encode_pairs(list(stream()), tok, tok, 50, 50)[0]


def _cli(*args: object, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), capture_output=True, text=True, env={**env(), "SEQXDUCE_CACHE": str(cache)},
                          cwd=REPO, timeout=300)


def _prepared(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("prepared-*") if p.is_dir())


@pytest.mark.parametrize("damage", ["truncated", "changed", "missing"])
def test_a_damaged_dataset_is_refused_in_one_line_and_prepared_again_only_when_asked(tmp_path, damage):
    cache = tmp_path / "cache"
    made = _cli("prepare", TINY, cache=cache)
    assert made.returncode == 0, made.stderr
    assert "prepared 300 training pairs of 300" in made.stderr
    (folder,) = _prepared(cache)
    ids = folder / "tgt.ids"
    data = ids.read_bytes()
    if damage == "truncated":
        ids.write_bytes(data[:-5])
    elif damage == "changed":
        ids.write_bytes(data[:10] + bytes([data[10] ^ 1]) + data[11:])
    else:
        ids.unlink()
    for attempt in (_cli("train", TINY, "--out", tmp_path / "run", *QUIET, cache=cache),
                    _cli("prepare", TINY, cache=cache)):
        assert attempt.returncode == 1
        lines = attempt.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in attempt.stderr, attempt.stderr
        assert f"{folder}: the prepared training data is damaged" in lines[0]
        assert "`seqxduce prepare RECIPE --again`" in lines[0]
    assert not ids.is_file() or ids.read_bytes() != data  # nothing prepared it again unasked
    again = _cli("prepare", TINY, "--again", cache=cache)
    assert again.returncode == 0, again.stderr
    assert ids.read_bytes() == data and _prepared(cache) == [folder]
    trained = _cli("train", TINY, "--out", tmp_path / "run", *QUIET, cache=cache)
    assert trained.returncode == 0, trained.stderr
    assert "the training data were prepared already" in trained.stderr


def _parallel_text(folder: Path, pairs: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    words = "the a house cat dog runs sees small big red".split()
    for split, n in (("train", pairs), ("valid", 5), ("test", 5)):
        lines = [" ".join(rng.choices(words, k=rng.randint(1, 6))) for _ in range(n)]
        (folder / f"{split}.en").write_text("\n".join(lines) + "\n")
        (folder / f"{split}.de").write_text("\n".join(line.upper() for line in lines) + "\n")


def test_a_changed_corpus_or_tokenizer_is_prepared_anew(tmp_path):
    cache = tmp_path / "cache"
    _parallel_text(tmp_path / "mydata", 200)
    recipe = tmp_path / "mine.toml"
    recipe.write_text('[task]\nname = "translation"\ndataset = "files"\ndata_dir = "mydata"\nsrc_lang = "en"\n'
                      'tgt_lang = "de"\n[tokenizer]\nname = "word"\n[model]\nname = "transformer"\n')
    first = _cli("prepare", recipe, cache=cache)
    assert first.returncode == 0, first.stderr
    assert "prepared 200 training pairs" in first.stderr
    second = _cli("prepare", recipe, cache=cache)  # the same files: known without reading them
    assert "the training data were prepared already: 200 pairs" in second.stderr, second.stderr
    assert len(_prepared(cache)) == 1
    with (tmp_path / "mydata" / "train.en").open("a") as en, (tmp_path / "mydata" / "train.de").open("a") as de:
        en.write("one more line\n")
        de.write("ONE MORE LINE\n")
    changed = _cli("prepare", recipe, cache=cache)
    assert "prepared 201 training pairs" in changed.stderr, changed.stderr
    other = _cli("prepare", recipe, "--set", "tokenizer.min_freq=2", cache=cache)
    assert "prepared 201 training pairs" in other.stderr, other.stderr
    assert len(_prepared(cache)) == 3


def test_two_torchrun_ranks_train_from_one_prepared_dataset(tmp_path):
    cache = tmp_path / "cache"
    made = _cli("prepare", TINY, cache=cache)
    assert made.returncode == 0, made.stderr
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "seqxduce",
           "train", str(TINY), "--out", str(tmp_path / "run"), *QUIET]
    result = subprocess.run(cmd, capture_output=True, text=True, env={**env(), "SEQXDUCE_CACHE": str(cache)},
                            cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the training data were prepared already" in result.stderr
    assert "prepared 300 training pairs" not in result.stderr  # nobody encoded again
    assert len(_prepared(cache)) == 1 and not list(cache.glob("tokens-*"))
    assert (tmp_path / "run" / "checkpoints" / "step_00000002.pt").is_file()
    # without `prepare` first, rank 0 prepares and rank 1 waits for it: still one dataset
    fresh = tmp_path / "fresh-cache"
    result = subprocess.run([*cmd[:-len(QUIET) - 2], "--out", str(tmp_path / "run2"), *QUIET], capture_output=True,
                            text=True, env={**env(), "SEQXDUCE_CACHE": str(fresh)}, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("prepared 300 training pairs") == 1
    assert len(_prepared(fresh)) == 1


def test_the_binarized_files_are_mapped_not_read(tmp_path):
    pairs = _random_pairs(50, 30)
    with binarized.DatasetWriter(tmp_path / "data", 30) as writer:
        chunk = PairArrays.from_pairs(pairs)
        writer.add(chunk.src_ids, chunk.src_lengths, chunk.tgt_ids, chunk.tgt_lengths)
        writer.close()
    read, _ = binarized.open_dataset(tmp_path / "data")
    maps = Path(f"/proc/{os.getpid()}/maps").read_text() if Path("/proc").is_dir() else ""
    if maps:
        assert str(tmp_path / "data" / "src.ids") in maps
    assert read == pairs


def test_two_writers_of_one_dataset_keep_the_first_and_only_again_replaces_it(tmp_path):
    """Two processes preparing the same key at once (the members of a run): the second to finish keeps the first's
    files, which are the same; `prepare --again` (replace) writes its own."""
    pairs = PairArrays.from_pairs(_random_pairs(50, 30))

    def writer(replace: bool = False) -> binarized.DatasetWriter:
        made = binarized.DatasetWriter(tmp_path / "data", 30, {"which": "first" if not replace else "again"},
                                       replace=replace)
        made.add(pairs.src_ids, pairs.src_lengths, pairs.tgt_ids, pairs.tgt_lengths)
        return made

    first, second = writer(), writer()
    first.close()
    second.close()  # renamed second: the folder is there already
    assert binarized.open_dataset(tmp_path / "data")[1]["which"] == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["data"]  # the second's work folder is gone
    writer(replace=True).close()
    read, meta = binarized.open_dataset(tmp_path / "data")
    assert meta["which"] == "again" and read == pairs


def _mapped_kib(path: Path) -> int:
    """The resident KiB of this process's mappings of a file (/proc/self/smaps)."""
    total, current = 0, None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and ":" not in fields[0]:
            current = fields[5] if len(fields) > 5 else None
        elif fields[0] == "Rss:" and current == str(path):
            total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="reads Linux's /proc/self/smaps")
def test_a_step_unmaps_the_dataset_pages_its_rows_were_read_from(tmp_path):
    """Gathering rows maps the page-cache folios around them into the process; a planned step's batches unmap
    them again, so that what a rank holds of the corpus does not grow with the steps it has taken."""
    from seqxduce.api import VocabInfo
    from seqxduce.training.step_plan import PlannedStep

    pairs = PairArrays.from_pairs(_random_pairs(200_000, 8000))
    with binarized.DatasetWriter(tmp_path / "data", 8000) as writer:
        writer.add(pairs.src_ids, pairs.src_lengths, pairs.tgt_ids, pairs.tgt_lengths)
        writer.close()
    mapped, _ = binarized.open_dataset(tmp_path / "data")
    vocab = VocabInfo(src_size=8000, tgt_size=8000, pad_id=0, bos_id=1, eos_id=2, shared=True)
    rows = list(range(0, 200_000, 997))
    mapped.collate(rows, vocab)
    assert _mapped_kib(tmp_path / "data" / "src.ids") > 0  # read through the mapping
    step = PlannedStep(1, 0, [rows], 0, mapped)
    (batch,) = step.batches(vocab)
    assert torch.equal(batch.src, pairs.collate(rows, vocab).src)
    assert _mapped_kib(tmp_path / "data" / "src.ids") == _mapped_kib(tmp_path / "data" / "tgt.offsets") == 0
