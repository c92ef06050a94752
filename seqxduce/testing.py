"""Pytest fixtures and helpers for a plugin's tests: a registry with given plugin objects, and the shared data.

A plugin's `tests/conftest.py` imports the fixtures it uses from here, e.g.
`from seqxduce.testing import ptb_sample, shared_dir  # noqa: F401`, so its tests run unchanged once the plugin
lives in its own repository. Needs pytest (the `test` extra); nothing in the core imports this module.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from seqxduce.api import DecodeRequest, Model, Tokenizer
from seqxduce.registry import Registry, new_manager, registry, reset_registry

# aten operations that copy a device value to the host (or need its size there) and so wait for the device
HOST_WAITS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
              "aten.is_nonzero.default", "aten.equal.default"}

# the token ids of TableModel's vocabulary that table_request declares; a test names its own tokens from 3 on
PAD, BOS, EOS = 0, 1, 2


def repository_root(start: Path) -> Path:
    """The nearest folder at or above `start` holding a pyproject.toml: the checkout a test file lives in."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    raise FileNotFoundError(f"no pyproject.toml at or above {start}")


def default_shared(root: Path) -> Path:
    """Where the recipes expect the shared data: ../shared beside the repository `root`."""
    return root.parent / "shared"


def shared_root(root: Path) -> Path:
    """The shared folder the tests read: $SEQXDUCE_SHARED (another copy, or a missing folder to check that every
    test needing it skips), else ../shared beside the repository `root`."""
    return Path(os.environ.get("SEQXDUCE_SHARED") or default_shared(root))


@contextlib.contextmanager
def plugins_registered(*plugins: object, entry_points: bool = True):
    """Make the process-wide registry the installed plugins plus these plugin objects, then restore it."""
    pm = new_manager(entry_points=entry_points)
    for i, plugin in enumerate(plugins):
        pm.register(plugin, name=f"test-plugin-{i}")
    try:
        reset_registry(Registry(pm))
        yield registry()
    finally:
        for plugin in plugins:
            pm.unregister(plugin)
        reset_registry(None)


def _shared(config: pytest.Config, relative: str) -> Path:
    """A folder of the shared data, or a skip naming what is missing and how to point the tests at it."""
    # pytest's rootdir is the folder of the pyproject.toml holding [tool.pytest.ini_options]: the repository
    # root, wherever the test file sits below it (tests/, plugins/X/tests/)
    path = shared_root(Path(config.rootpath)) / relative
    if not path.is_dir():
        pytest.skip(f"{path} is missing: the test needs the shared data beside the repository "
                    "(or SEQXDUCE_SHARED=/path/to/shared)")
    return path


@pytest.fixture(scope="session")
def shared_dir(pytestconfig: pytest.Config) -> Path:
    """The shared folder beside the repository (data, reference outputs); the test skips without it."""
    return _shared(pytestconfig, ".")


@pytest.fixture(scope="session")
def ptb_sample(pytestconfig: pytest.Config, shared_dir: Path) -> Path:
    """The NLTK Penn Treebank sample (wsj_0001.mrg ... wsj_0199.mrg)."""
    return _shared(pytestconfig, "data/ptb_sample")


@pytest.fixture(scope="session")
def evalb_reference(pytestconfig: pytest.Config, shared_dir: Path) -> Path:
    """gold.mrg, test.mrg and the original EVALB's output on them (evalb_COLLINS.out)."""
    return _shared(pytestconfig, "evalb_reference")


@pytest.fixture(scope="session")
def multi30k(pytestconfig: pytest.Config, shared_dir: Path) -> Path:
    """The Multi30k plain-text files."""
    return _shared(pytestconfig, "data/multi30k")


# the smallest Transformer a test trains in seconds: one layer each side, 16 wide
TINY_MODEL: dict[str, object] = {"name": "transformer", "layers": 1, "d_model": 16, "d_ff": 32, "heads": 2}


def tiny_recipe(task: dict[str, object], tokenizer: dict[str, object], train: dict[str, object] | None = None,
                decode: dict[str, object] | None = None, model: dict[str, object] | None = None) -> str:
    """A recipe's TOML text for a test: its [task] and [tokenizer] as given, the tiny Transformer (TINY_MODEL, with
    `model`'s keys over it), [train] on the CPU with `train`'s keys, and [decode] when given. Values are strings,
    numbers, booleans or lists of them."""
    sections = {"task": task, "tokenizer": tokenizer, "model": {**TINY_MODEL, **(model or {})},
                "train": {"device": "cpu", **(train or {})}}
    if decode is not None:
        sections["decode"] = decode
    return "\n".join(f"[{name}]\n" + "".join(f"{key} = {_toml(value)}\n" for key, value in keys.items())
                     for name, keys in sections.items())


def _toml(value: object) -> str:
    # by hand: the standard library reads TOML (tomllib) but does not write it, and these are plain values
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_toml, value)) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def train_tiny_run(recipe: Path, out: Path) -> Path:
    """Train `recipe` into `out` through the CLI for the tests that only read a finished run (a session fixture
    calls it once): checkpoints every 2 steps and their average of the last 2, every batch the whole training set."""
    from click.testing import CliRunner

    from seqxduce.cli import add_plugin_commands

    result = CliRunner().invoke(add_plugin_commands(), ["train", str(recipe), "--out", str(out),
                                                        "--set", "train.average_last=2",
                                                        "--set", "train.max_tokens=100000"])
    assert result.exit_code == 0, result.output
    return out


class TableModel(Model):
    """A fake model for a decoder's tests: log p(next | last token, position) = table[position, last]; the cache is
    the position. `table` is a torch tensor (L, V, V) of unnormalized scores."""

    def __init__(self, table):
        self.table = table.log_softmax(-1)  # (L, V, V)
        self.training = False

    def forward(self, src, tgt_in):  # pragma: no cover - search never calls it
        raise NotImplementedError

    def encode(self, src):
        return src

    def init_cache(self, memory):
        return 0

    def step(self, tokens, memory, cache):
        pos = min(cache, self.table.size(0) - 1)
        return self.table[pos, tokens], cache + 1

    def reorder(self, memory, cache, index):
        return memory[index], cache


class RandomModel(Model):
    """A fake model whose log-probs are drawn afresh at every step from a seeded generator (so they depend on how
    many rows the batch has): no notion of the task at all."""

    def __init__(self, vocab_size: int, seed: int):
        import torch

        self.vocab_size = vocab_size
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, src, tgt_in):  # pragma: no cover - search never calls it
        raise NotImplementedError

    def encode(self, src):
        return src

    def init_cache(self, memory):
        return None

    def step(self, tokens, memory, cache):
        import torch

        logits = torch.randn(tokens.size(0), self.vocab_size, generator=self.generator) * 3.0  # (B, V)
        return logits.log_softmax(dim=-1), None

    def reorder(self, memory, cache, index):
        return memory[index], None


class ListTokenizer(Tokenizer):
    """A fixed vocabulary given as a list of entries, with the specials at 0-3 as the word tokenizer has them."""

    def __init__(self, tokens: list[str]):
        self.tokens = tokens

    def train(self, texts: Iterable[str], workdir: Path) -> None:
        raise NotImplementedError

    def save(self, directory: Path, prefix: str) -> None:
        raise NotImplementedError

    def load(self, directory: Path, prefix: str) -> None:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        return [self.tokens.index(t) if t in self.tokens else self.unk_id for t in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.tokens[i] for i in ids if i > self.unk_id)

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def id_to_token(self, index: int) -> str:
        return self.tokens[index]


def table_request(lengths: list[int]) -> DecodeRequest:
    """A DecodeRequest of len(lengths) sources of these lengths (token 3, padded with PAD) for TableModel."""
    import torch  # here, so that importing the fixtures above needs no torch

    width = max(lengths)
    src = torch.full((len(lengths), width), PAD)
    for i, n in enumerate(lengths):
        src[i, :n] = 3
    return DecodeRequest(src=src, sources=["x"] * len(lengths), bos_id=BOS, eos_id=EOS, pad_id=PAD)


def _host_reads_class() -> type:
    import torch  # here: importing the fixtures needs no torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class HostReads(TorchDispatchMode):
        """Records every operation that, on a CUDA tensor, would make the host wait for the device: on the CPU
        it stands in for torch.cuda.set_sync_debug_mode("error"). Blind to .tolist(), which the CPU reads
        without dispatching."""

        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)
            bool_index = name.startswith("aten.index") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for a in args if isinstance(a, (list, tuple))
                for i in a)
            if name in HOST_WAITS or bool_index:
                self.seen.append(name)
            return func(*args, **(kwargs or {}))

    return HostReads


def __getattr__(name: str):
    """HostReads subclasses a torch class, so it is built when a test first imports it (PEP 562)."""
    if name == "HostReads":
        cls = globals()["HostReads"] = _host_reads_class()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
