"""Preparing a run's training data once: the tokenizer trained on the training text, then the whole split
encoded on every core, cleaned by the length limits and written as a binarized dataset (corpus.binarized) that
every run with the same key maps and every rank of a run shares.

Two keys name a dataset's folder under the cache root ($SEQXDUCE_CACHE, else ~/.cache/seqxduce):
- `prepared-KEY` (a new run's: the data, the [task] and [tokenizer] settings and the length limits) holds the
  trained tokenizer files too, so that `seqxduce prepare RECIPE` does the work ahead of `seqxduce train`, and a
  second run of the recipe takes the same tokenizers (their training is seeded: the files are those it would train);
- `tokens-KEY` (a run whose tokenizer files come from elsewhere: --resume, --tokenizers-from, --init-from, an
  ensemble's members: the data, the tokenizer files' bytes and the limits) holds the ids alone, and is written
  only when no prepared folder holds those ids already (dataset_for_files): a resumed or restarted run, and a run
  given the same tokenizer files, map what `prepare` or the first run wrote, so that there is one dataset per
  corpus, tokenizer files and limits, whatever the route that made it.
The data enter a key by their files' names, sizes and times when the task names its files (Task.data_files),
else by the text of their examples."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path

import numpy as np

from seqxduce import components
from seqxduce.api import Example, Task, Tokenizer, UserError, count_lines
from seqxduce.console import PairsProgress, console
from seqxduce.corpus import binarized
from seqxduce.corpus.arrays import PairArrays
from seqxduce.corpus.mixture import Balanced
from seqxduce.corpus.token_cache import cache_root
from seqxduce.cpus import usable_cpus
from seqxduce.recipe import Recipe
from seqxduce.settings_check import keyed_values
from seqxduce.signals import preparing_stopped, stop_while_preparing
from seqxduce.stopping import signals_held, worker_defaults
from seqxduce.tokenizer_files import TokenizerFiles

TOKENIZERS = "tokenizers"  # the folder of a prepared dataset's tokenizer files
SHARD = 20_000  # pairs a worker encodes at a time: the progress moves by this much
IN_PROCESS = 50_000  # below this many pairs, one process encodes (starting workers would cost more)


class Examples:
    """A split's examples, streamed from the task (Task.stream) and read anew each time they are iterated, so that
    preparing a corpus (the tokenizer's training, then the encoding; each epoch's sample under subword sampling)
    never holds it as Python strings."""

    def __init__(self, task: Task, data_dir: Path, split: str = "train"):
        self.task, self.data_dir, self.split = task, data_dir, split

    def __iter__(self) -> Iterator[Example]:
        return self.task.stream(self.split, self.data_dir)

    def lines_hint(self) -> int | None:
        """How many lines the split's first file holds, when the task names its files (a progress bar's total:
        the pairs before the task's cleaning); counted at disk speed, no text decoded."""
        files = self.task.data_files(self.split, self.data_dir)
        return count_lines(files[0]) if files else None


def nonempty(recipe: Recipe, examples: Iterable[Example]) -> Iterable[Example]:
    """examples, refused in one line when they hold none (only the first is read)."""
    if next(iter(examples), None) is None:
        where = f" from {examples.data_dir}" if isinstance(examples, Examples) else ""
        raise UserError(f"[task] name = {recipe.task.core.name!r} read no training examples{where}: the training "
                        "file is empty")
    return examples


class Counted:
    """Examples iterated once, counting them as they pass."""

    def __init__(self, examples: Iterable[Example]):
        self.examples, self.count = examples, 0

    def __iter__(self) -> Iterator[Example]:
        for example in self.examples:
            self.count += 1
            yield example


def data_fingerprint(task: Task, data_dir: Path, examples: Iterable[Example]) -> str:
    """What the training split's content enters a key as: its files' paths, sizes and modification times when the
    task names them (no text is read), else a digest of its examples' text."""
    digest = hashlib.sha256(b"data\0")
    files = task.data_files("train", data_dir)
    if files:
        for path in files:
            stat = Path(path).stat()
            digest.update(f"{Path(path).resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        return digest.hexdigest()
    for ex in examples:
        digest.update(ex.source.encode() + b"\0" + ex.target.encode() + b"\n")
    return digest.hexdigest()


def _key(*parts: object) -> str:
    digest = hashlib.sha256(binarized.FORMAT.encode())
    for part in parts:
        digest.update(b"\0" + json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:32]


def limits(recipe: Recipe) -> tuple[int, int]:
    return recipe.train.max_source_len, recipe.train.max_target_len


def prepared_folder(recipe: Recipe, fingerprint: str, root: Path | None = None) -> Path:
    """The folder of a new run's dataset and tokenizers: keyed by the data, [task], [tokenizer] and the limits."""
    files = _file_digests(recipe)  # a part only when there are files: the other datasets keep their keys
    key = _key(fingerprint, _task(recipe), recipe.resolved()["tokenizer"], *([files] if files else []),
               limits(recipe))
    return (root or cache_root()) / f"prepared-{key}"


def _task(recipe: Recipe) -> dict:
    """[task] as a key holds it: the data directory as the folder it names, so that the recipe a run saved (its
    paths made absolute) keys the same datasets as the recipe file it was started from."""
    return {**keyed_values(recipe.resolved()["task"], recipe.task.settings),
            "data_dir": str(components.data_dir(recipe).resolve())}


def _file_digests(recipe: Recipe) -> dict[str, str]:
    """The digest of each file a [tokenizer] setting names (declared setting(file=True): a model_file), so that a
    model replaced at the same path makes a new dataset; a file not there is left to the tokenizer to refuse."""
    settings = recipe.tokenizer.settings
    found = {}
    for f in dataclasses.fields(settings) if dataclasses.is_dataclass(settings) else ():
        path = Path(str(getattr(settings, f.name))).expanduser()
        if f.metadata.get("file") and getattr(settings, f.name) and path.is_file():
            found[f.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def tokens_folder(recipe: Recipe, fingerprint: str, tokenizer_files: Sequence[Path], tokenizers: components.Tokenizers,
                  root: Path | None = None) -> Path:
    """The folder of the ids of a run whose tokenizer files come from elsewhere: keyed by the data, those files'
    bytes, the tokenizer classes, [task] and the limits."""
    digest = hashlib.sha256()
    for name, content in sorted(_contents(tokenizer_files).items()):
        digest.update(name.encode() + b"\0" + content + b"\0")
    classes = [f"{type(t).__module__}.{type(t).__qualname__}" for t in (tokenizers.src, tokenizers.tgt)]
    key = _key(fingerprint, digest.hexdigest(), classes, _task(recipe), limits(recipe))
    return (root or cache_root()) / f"tokens-{key}"


def _contents(files: Iterable[Path]) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in files}


TOKENS_KEY = "tokens_key"  # a prepared folder's meta: the tokens-KEY its ids would have (dataset_for_files)


def dataset_for_files(recipe: Recipe, fingerprint: str, tokenizer_files: Sequence[Path],
                      tokenizers: components.Tokenizers, root: Path | None = None) -> Path:
    """The dataset of the ids that tokenizer files (a run's, taken from elsewhere) give the recipe's data: a
    prepared folder that holds them already (the recipe's own, its tokenizer files byte for byte those; or any
    whose meta names the same tokens key), else the tokens-KEY folder, written when it is not there. Every rank
    finds the same: datasets are only added, and one found existed before any rank looked."""
    folder = tokens_folder(recipe, fingerprint, tokenizer_files, tokenizers, root)
    if binarized.exists(folder):
        return folder
    own = prepared_folder(recipe, fingerprint, root)
    if binarized.exists(own) and (own / TOKENIZERS).is_dir() and \
            _contents(TokenizerFiles(own / TOKENIZERS).files(recipe)) == _contents(tokenizer_files):
        return own
    for other in sorted(folder.parent.glob("prepared-*")):  # another recipe's preparation with the same ids
        if binarized.exists(other) and _tokens_key(other) == folder.name:
            return other
    return folder


def _tokens_key(folder: Path) -> str | None:
    try:
        return binarized.read_meta(folder).get(TOKENS_KEY)
    except UserError:  # not one this version reads: not a candidate
        return None


# ---------------------------------------------------------------- encoding on every core

# a shard's place in the corpus (0, 1, ...), its pairs' texts and the corpus they come from (Example.corpus: a
# shard holds one corpus's pairs, so that the dataset knows where each corpus lies)
Shard = tuple[int, list[str], list[str], str]
# a shard's ids by another encoding than the tokenizers' encode_batch (corpus.sampled_epochs: one epoch's sample)
ShardEncoding = Callable[[int, list[str], list[str]], tuple[list[list[int]], list[list[int]]]]


@dataclass
class _Job:
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    max_src: int
    max_tgt: int
    dtype: np.dtype
    encoding: ShardEncoding | None = None


_JOB: _Job | None = None  # what forked workers inherit: the tokenizers are not pickled to them


def _encode_shard(shard: Shard) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, str]:
    """Encode a shard's pairs as data.encode_pairs does (source + eos, pairs over the limits dropped): each side's
    ids end to end and the lengths, how many pairs were dropped and how many were read, and their corpus."""
    job = _JOB
    assert job is not None
    index, source_texts, target_texts, corpus = shard
    if job.encoding is not None:
        sources, targets = job.encoding(index, source_texts, target_texts)
    else:
        sources = encode_batch(job.src_tok, source_texts)
        targets = encode_batch(job.tgt_tok, target_texts)
    eos = job.src_tok.eos_id
    src_lengths = np.fromiter((len(s) + 1 for s in sources), dtype=np.int64, count=len(sources))
    tgt_lengths = np.fromiter((len(t) for t in targets), dtype=np.int64, count=len(targets))
    # within_limits: the source with its eos, the target with the eos the loss adds
    keep = (src_lengths <= job.max_src) & (tgt_lengths + 1 <= job.max_tgt)
    kept = np.flatnonzero(keep).tolist()
    src_ids = np.fromiter(chain.from_iterable(chain(sources[i], (eos,)) for i in kept), dtype=job.dtype,
                          count=int(src_lengths[keep].sum()))
    tgt_ids = np.fromiter(chain.from_iterable(targets[i] for i in kept), dtype=job.dtype,
                          count=int(tgt_lengths[keep].sum()))
    return (src_ids, src_lengths[keep], tgt_ids, tgt_lengths[keep], len(sources) - len(kept), len(sources),
            corpus)


def encode_batch(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """tok.encode_batch(texts); a stand-in that is not a Tokenizer subclass (tests) may lack it."""
    batch = getattr(tok, "encode_batch", None)
    return batch(texts) if batch is not None else [tok.encode(text) for text in texts]


def _shards(examples: Iterable[Example]) -> Iterator[Shard]:
    sources: list[str] = []
    targets: list[str] = []
    index, corpus = 0, ""
    for ex in examples:
        if sources and ex.corpus != corpus:  # a new corpus starts a new shard
            yield index, sources, targets, corpus
            sources, targets, index = [], [], index + 1
        corpus = ex.corpus
        sources.append(ex.source)
        targets.append(ex.target)
        if len(sources) == SHARD:
            yield index, sources, targets, corpus
            sources, targets, index = [], [], index + 1
    if sources:
        yield index, sources, targets, corpus


def _in_order(pool: Pool, shards: Iterable[Shard], window: int) -> Iterator[tuple]:
    """The shards encoded by the pool, in corpus order, with at most `window` of them read and not yet written
    (Pool.imap would read the whole corpus ahead of its workers)."""
    pending: deque[AsyncResult] = deque()
    for shard in shards:
        pending.append(pool.apply_async(_encode_shard, (shard,)))
        if len(pending) >= window:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def encode_into(writer: binarized.DatasetWriter, examples: Iterable[Example], tokenizers: components.Tokenizers,
                max_src: int, max_tgt: int, workers: int | None = None, show: bool = True,
                total: int | None = None, encoding: ShardEncoding | None = None, what: str = "encoding") -> int:
    """Encode the examples into writer in corpus order, on `workers` processes (default: every core), reading them
    as a stream of SHARD-pair shards; returns how many pairs the limits dropped. total (optional) is the progress
    bar's, `what` its label; encoding replaces the tokenizers' own. Measured against sentencepiece's own threaded
    batch encoding in bench/data_scale.py."""
    global _JOB
    workers = workers or usable_cpus()
    shards = _shards(examples)
    head = list(islice(shards, -(-IN_PROCESS // SHARD)))  # enough to tell a small corpus from a large one
    pooled = workers > 1 and sum(len(shard[1]) for shard in head) >= IN_PROCESS
    _JOB = _Job(tokenizers.src, tokenizers.tgt, max_src, max_tgt, writer.dtype, encoding)
    try:
        if pooled:
            # fork: the workers inherit the tokenizers instead of receiving them pickled; started before the
            # progress display's thread, which a fork must not copy mid-lock
            with signals_held():
                pool = multiprocessing.get_context("fork").Pool(workers, initializer=worker_defaults)
            with pool, PairsProgress(what, total, enabled=show) as progress:
                return _write(writer, _in_order(pool, chain(head, shards), 2 * workers), progress)
        with PairsProgress(what, total, enabled=show) as progress:
            return _write(writer, map(_encode_shard, chain(head, shards)), progress)
    finally:
        _JOB = None


def _write(writer: binarized.DatasetWriter, results: Iterable[tuple], progress: PairsProgress) -> int:
    dropped = 0
    for result in results:
        preparing_stopped()
        # a task of one corpus adds its chunks as it always did
        writer.add(*result[:4], **({"corpus": result[6]} if result[6] else {}))
        dropped += result[4]
        progress.advance(result[5])
    return dropped


# ---------------------------------------------------------------- the two kinds of folder

def write_dataset(folder: Path, examples: Iterable[Example], tokenizers: components.Tokenizers, recipe: Recipe,
                  tokenizer_folder: Path | None = None, workers: int | None = None, show: bool = True,
                  total: int | None = None, replace: bool = False, meta: dict | None = None) -> Path:
    """Encode the examples (iterated once) into a dataset at folder (with a copy of tokenizer_folder's files, for a
    prepared folder), atomically, and print what was done in one line."""
    started = time.perf_counter()
    vocab_size = max(tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
    read = Counted(examples)
    with binarized.DatasetWriter(folder, vocab_size, replace=replace) as writer:
        dropped = encode_into(writer, read, tokenizers, *limits(recipe), workers=workers, show=show, total=total)
        if not read.count:
            raise UserError(f"[task] name = {recipe.task.core.name!r} read no training examples: the training "
                            "file is empty")
        if tokenizer_folder is not None:
            shutil.copytree(tokenizer_folder, writer.work / TOKENIZERS)
        writer.extra.update({"read": read.count, "dropped": {"over max_source_len/max_target_len": dropped},
                             **(meta or {})})
        kept = writer.pairs
        writer.close()
    if kept == 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise UserError("train: no pairs left after the length limits; raise [train] max_source_len/max_target_len")
    seconds = time.perf_counter() - started
    if show:
        console.print(f"prepared {kept} training pairs of {read.count} in {seconds:.1f} s "
                      f"({read.count / max(seconds, 1e-9):,.0f} pairs/s); dropped {dropped} over "
                      f"max_source_len/max_target_len; {folder} ({_size(binarized.size_on_disk(folder))})")
    return folder


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.1f} MB"


def prepare_new(recipe: Recipe, folder: Path, examples: Iterable[Example], fingerprint: str,
                workers: int | None = None, show: bool = True, total: int | None = None,
                replace: bool = False) -> Path:
    """A new run's prepared folder: the tokenizer(s) trained on the examples, then the dataset with them, its meta
    naming the tokens key of those ids (dataset_for_files: fingerprint is the data's). examples is iterated more
    than once (an Examples stream reads its files anew each time)."""
    nonempty(recipe, examples)
    work = binarized.work_folder(folder, "tok-")
    try:
        tokenizer_dir = work / TOKENIZERS
        files = TokenizerFiles(tokenizer_dir)
        train_tokenizers_shown(files, recipe, examples, total=total, show=show)
        preparing_stopped()
        tokenizers = files.load(recipe)
        key = tokens_folder(recipe, fingerprint, files.files(recipe), tokenizers).name
        return write_dataset(folder, examples, tokenizers, recipe, tokenizer_dir, workers=workers, show=show,
                             total=total, replace=replace, meta={TOKENS_KEY: key})
    finally:
        shutil.rmtree(work, ignore_errors=True)


def train_tokenizers_shown(files: TokenizerFiles, recipe: Recipe, examples: Iterable[Example], total: int | None = None,
                           show: bool = True, task: Task | None = None) -> None:
    """files.train with what a log file needs, for a tokenizer that trains for minutes on a large
    corpus: a first line, the pairs it has read (a bar on a terminal, else a plain line at a steady pace), a line
    when the text is read and the tokenizer trains on it (SentencePiece says nothing while it does), and the
    time it took. total: the pairs the examples hold, when known (for the ETA). The task's (default: an Examples'
    own) reserved symbols are kept whole, and a task with several corpora has its text balanced by temperature
    (corpus.mixture.Balanced)."""
    task = task if task is not None else getattr(examples, "task", None)
    reserved = task.reserved_symbols() if task is not None else ()
    weights = task.corpus_weights() if task is not None else {}
    if len(weights) > 1:
        examples = Balanced(examples, weights, recipe.train.sampling_temperature)
    started = time.perf_counter()
    name = recipe.tokenizer.component.name
    if show:
        console.print(f"training the tokenizer ({name}) on the training text"
                      + (f" ({total:,} pairs)" if total is not None else ""), markup=False, highlight=False)
    passes = 1 if recipe.tokenizer.core.shared else 2  # a tokenizer per side reads the text once for each
    with PairsProgress("tokenizer: reading the text", total * passes if total is not None else None,
                       enabled=show) as progress:
        files.train(recipe, _Reading(examples, progress, started, name), reserved)
    if show:
        console.print(f"trained the tokenizer in {time.perf_counter() - started:.1f} s", markup=False,
                      highlight=False)


class _Reading:
    """The examples as a tokenizer reads them, counted into a progress (every EVERY pairs: a bar's update per
    pair would cost more than the reading); at the end of each pass, in a log file, a line saying that the
    tokenizer now trains on what it read."""

    EVERY = 2_000

    def __init__(self, examples: Iterable[Example], progress: PairsProgress, started: float, name: str):
        self.examples, self.progress, self.started, self.name = examples, progress, started, name

    def __iter__(self) -> Iterator[Example]:
        count = pending = 0
        for example in self.examples:
            yield example
            count += 1
            pending += 1
            if pending == self.EVERY:
                self.progress.advance(pending)
                pending = 0
        self.progress.advance(pending)
        if self.progress.plain:
            console.print(f"tokenizer: read {count:,} pairs in {time.perf_counter() - self.started:.1f} s; "
                          f"{self.name} trains on them now", markup=False, highlight=False)


def open_prepared(folder: Path) -> PairArrays:
    """A prepared dataset's pairs, mapped; a damaged one refused in one line."""
    return binarized.open_dataset(folder)[0]


def prepare_training_data(recipe: Recipe, task: Task, data_dir: Path, again: bool = False,
                          workers: int | None = None) -> Path:
    """`seqxduce prepare`: a new run's prepared folder for the recipe, made unless it is there (again: made anew,
    replacing one that is damaged); returns it."""
    examples = Examples(task, data_dir)
    with stop_while_preparing("preparing the training data"):
        fingerprint = data_fingerprint(task, data_dir, examples)
        folder = prepared_folder(recipe, fingerprint)
        if binarized.exists(folder) and not again:
            pairs, meta = binarized.open_dataset(folder)  # a damaged one is refused: --again replaces it
            console.print(f"the training data were prepared already: {len(pairs)} pairs in {folder} "
                          f"({_size(binarized.size_on_disk(folder))}); --again prepares them anew")
            return folder
        return prepare_new(recipe, folder, examples, fingerprint, workers=workers, total=examples.lines_hint(),
                           replace=again)
