"""Records what the searches return on many seeded tiny models, and checks a later version's outputs against the
record for parity: the check for a change of seqxduce/decoding/search.py or of a model's decoding step.

    python -m tests.search_identity record /tmp/before.json   # with the search as it was
    python -m tests.search_identity compare /tmp/before.json  # after the change: exit 1 when parity fails

Parity (issue #40): the outputs (each source's n-best token lists) equal the recorded ones on at least 99.5% of
the sources, the ones that differ listed with both scores; and every score and log-prob of an equal output
within 1e-4 of the record. Last-bit differences of the floats are allowed (a one-query attention kernel, a
log-softmax computed only for kept candidates round differently); a change that moves more than that is a real
change and must say so. `tests/fixtures/search_record.json` is the record of the search before issue #40 (scores
to 9 significant digits, positional log-probs left out), made with `record --compact` at 53bb808 on the 2-core
Xeon; tests/decoding/test_search_parity.py checks a slice of the cases against it on every run. Cases: TableModel tables
(some with ties, some with forbidden tokens), a random constraint that can forbid everything (dead ends),
ensembles, the parser's tree constraint in each words-in-target mode, tables of exactly tying log-probs
(finished hypotheses of equal score from different steps), and a randomly initialized Transformer; beam widths
1 to 6, nbest 1 to beam, alpha below, at and above 0, early_stop on and off, min_len, greedy search too.
"""

from __future__ import annotations

import json
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

from seqxduce.api import DecodeRequest, Hypothesis, StepConstraint
from seqxduce.decoding.ensemble import EnsembleModel
from seqxduce.decoding.search import beam_search, greedy_search
from seqxduce.decoding.search_settings import SearchSettings
from seqxduce.testing import ListTokenizer, RandomModel, TableModel, table_request
from tests.tiny import TINY_RECIPE

TREE_VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "XX", "(S", ")S", "(NP", ")NP", "(VP", ")VP", "(PP",
              "NN", "John", "left", ",", ".", "''"]


def beam_settings(beam: int, alpha: float, nbest: int, early_stop: bool, min_len: int, a: float, b: int):
    """Plain attributes, not BeamSettings: its range check refuses alpha < 0, which the search still handles."""
    return types.SimpleNamespace(beam=beam, alpha=alpha, nbest=nbest, early_stop=early_stop, min_len=min_len,
                                 max_len_a=a, max_len_b=b, length_penalty="gnmt", limit_eos="scored")


def as_json(hyps: list[list[Hypothesis]]) -> list:
    return [[[h.tokens, h.score, h.logprob, h.positional_logprobs] for h in nbest] for nbest in hyps]


class RandomMaskConstraint(StepConstraint):
    """Allows token j after token i where allowed[i, j]; a row of allowed may be all False, so a hypothesis can
    reach a point where nothing is allowed before its length limit (a dead end)."""

    def __init__(self, allowed: torch.Tensor, bos: int):
        self.allowed, self.bos = allowed, bos

    def start(self, request: DecodeRequest, rows: torch.Tensor) -> None:
        self.last = torch.full((rows.numel(),), self.bos, dtype=torch.long)

    def mask(self, logprobs: torch.Tensor) -> torch.Tensor:
        return logprobs.masked_fill(~self.allowed[self.last], float("-inf"))

    def advance(self, origin: torch.Tensor, tokens: torch.Tensor) -> None:
        self.last = tokens.clone()


def random_table(g: torch.Generator, kind: str) -> TableModel:
    vocab = int(torch.randint(5, 10, (1,), generator=g))
    length = int(torch.randint(1, 9, (1,), generator=g))
    table = torch.randn(length, vocab, vocab, generator=g) * 2
    if kind == "ties":
        table = table.round()  # equal log-probs, so equal scores that the tie rule must order
    elif kind == "forbidden":
        table = table.masked_fill(torch.rand(table.shape, generator=g) < 0.3, float("-inf"))
    elif kind == "uniform":
        # every log-prob is -log 1, -log 2 or -log 4, so hypotheses that end at different steps tie exactly
        support = 2 ** torch.randint(0, 3, (length, vocab), generator=g)
        ranks = torch.rand(table.shape, generator=g).argsort(-1).argsort(-1)
        table = torch.zeros_like(table).masked_fill(ranks >= support.unsqueeze(-1), float("-inf"))
    return TableModel(table)


def random_request(g: torch.Generator) -> DecodeRequest:
    return table_request([int(n) for n in torch.randint(1, 6, (int(torch.randint(1, 5, (1,), generator=g)),),
                                                        generator=g)])


def random_settings(g: torch.Generator):
    pick = lambda options: options[int(torch.randint(len(options), (1,), generator=g))]  # noqa: E731
    beam = pick([1, 2, 3, 4, 6])
    return beam_settings(beam, pick([0.0, 0.6, 1.0, 2.0, -0.5]), pick(sorted({1, 2, beam})), pick([False, True]),
                         pick([0, 0, 1, 3]), pick([0.0, 0.5, 1.5]), pick([1, 2, 4, 6]))


def table_cases(count: int) -> dict:
    out = {}
    for i in range(count):
        g = torch.Generator().manual_seed(i)
        kind = ["plain", "ties", "forbidden"][i % 3]
        model, req, s = random_table(g, kind), random_request(g), random_settings(g)
        name = f"table{i}-{kind}-beam{s.beam}-a{s.alpha}-n{s.nbest}-es{int(s.early_stop)}-min{s.min_len}"
        out[name] = as_json(beam_search(model, req, s))
        if i % 4 == 0:
            out[f"{name}-greedy"] = as_json(greedy_search(model, req, SearchSettings(
                max_len_a=s.max_len_a, max_len_b=s.max_len_b, min_len=s.min_len)))
        if i % 5 == 0:
            other = random_table(torch.Generator().manual_seed(i + 1000), "plain")
            if other.table.size(-1) == model.table.size(-1):
                out[f"{name}-ensemble"] = as_json(beam_search(EnsembleModel([model, other]), req, s))
            out[f"{name}-ensemble-self"] = as_json(beam_search(EnsembleModel([model, model]), req, s))
        if i % 3 == 1:
            vocab = model.table.size(-1)
            allowed = torch.rand(vocab, vocab, generator=g) < 0.5
            allowed[torch.rand(vocab, generator=g) < 0.3] = False  # after these tokens nothing is allowed
            out[f"{name}-deadends"] = as_json(beam_search(model, req, s, RandomMaskConstraint(allowed, 1)))
    return out


def tie_cases(count: int) -> dict:
    """Ties between a new finished hypothesis and older ones: the new one must go after them."""
    out = {}
    for i in range(count):
        g = torch.Generator().manual_seed(10_000 + i)
        model, req, s = random_table(g, "uniform"), random_request(g), random_settings(g)
        s.alpha = [0.0, 0.0, 0.6, -0.5][i % 4]
        name = f"ties{i}-beam{s.beam}-a{s.alpha}-n{s.nbest}-es{int(s.early_stop)}-min{s.min_len}"
        out[name] = as_json(beam_search(model, req, s))
    return out


def tree_cases(seeds: int = 4) -> dict:
    from seqxduce_parsing.constraint import TreeConstraint

    tokenizer = ListTokenizer(TREE_VOCAB)
    punct = {"punctuation_tags": ["``", "''", ".", ":", ","], "punctuation_words": [",", "."], "either_words": ["'"]}
    out = {}
    sources = [["a", "a b", "a b c", "a b c d e f", "a b c d"], ["John", "John left", "left John Mary left"],
               ["a , b .", ". a", "a b , , c"]]
    for seed in range(seeds):
        for mode in ["none", "after_leaf", "before_leaf", "as_leaf"]:
            for src in sources:
                extra = punct if src is sources[2] else {}
                for beam, alpha, nbest, early in [(4, 0.3, 4, False), (3, 0.0, 1, True), (5, 1.0, 2, False)]:
                    c = TreeConstraint(tokenizer, max_len_a=1.0, max_len_b=12, words_in_target=mode, **extra)
                    longest = max(len(s.split()) for s in src) + 1
                    raw = torch.zeros(len(src), longest, dtype=torch.long)
                    for j, s in enumerate(src):
                        raw[j, : len(s.split()) + 1] = 5
                    req = DecodeRequest(src=raw, sources=src, bos_id=1, eos_id=2, pad_id=0)
                    s = beam_settings(beam, alpha, nbest, early, 0, 1.0, 12)
                    name = f"tree{seed}-{mode}-{src[0]}-beam{beam}"
                    out[name] = as_json(beam_search(RandomModel(len(TREE_VOCAB), seed), req, s, c))
    return out


def transformer_cases() -> dict:
    from seqxduce.recipe import load_recipe
    from seqxduce.training.run import assemble

    recipe = TINY_RECIPE
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = assemble(load_recipe(recipe, ["train.validate_every=0", "train.valid_decode_examples=0"]),
                           Path(tmp) / "run")
    model = trainer.model.eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.5)
    tgt = trainer.tokenizers.tgt
    out = {}
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        lengths = torch.randint(1, 7, (5,), generator=g).tolist()
        src = torch.full((5, max(lengths) + 1), tgt.pad_id)
        for j, n in enumerate(lengths):
            src[j, :n] = torch.randint(4, trainer.tokenizers.src.vocab_size, (n,), generator=g)
            src[j, n] = tgt.eos_id
        req = DecodeRequest(src=src, sources=["x"] * 5, bos_id=tgt.bos_id, eos_id=tgt.eos_id, pad_id=tgt.pad_id)
        s = random_settings(g)
        out[f"transformer{seed}-beam{s.beam}-a{s.alpha}-es{int(s.early_stop)}"] = as_json(beam_search(model, req, s))
        out[f"transformer{seed}-greedy"] = as_json(greedy_search(model, req, SearchSettings(max_len_b=4)))
    return out


def all_cases() -> dict:
    return {**table_cases(300), **tie_cases(200), **tree_cases(), **transformer_cases()}


def quick_cases() -> dict:
    """A slice of all_cases() (the same names and outputs) that runs in seconds, for the test suite."""
    return {**table_cases(60), **tie_cases(40), **tree_cases(seeds=1), **transformer_cases()}


def compact(cases: dict) -> dict:
    """The record without positional log-probs, scores to 9 significant digits: what parity compares."""
    return {name: [[[h[0], float(f"{h[1]:.9g}"), float(f"{h[2]:.9g}")] for h in nbest] for nbest in lists]
            for name, lists in cases.items()}


@dataclass
class Parity:
    """How a search's outputs compare with a record, source by source (one n-best list is one source)."""

    sources: int = 0
    equal: int = 0
    differ: list[str] = field(default_factory=list)  # "case #source: want TOKENS (score) got TOKENS (score)"
    far: list[str] = field(default_factory=list)  # equal outputs whose score or log-prob moved more than `tolerance`
    max_score_diff: float = 0.0  # the largest score or log-prob difference of an equal output
    missing: list[str] = field(default_factory=list)  # recorded cases the run did not produce

    def holds(self, share: float = 0.995) -> bool:
        return not self.missing and not self.far and self.equal >= share * self.sources

    def summary(self) -> str:
        return (f"{self.equal} of {self.sources} sources equal ({self.equal / max(self.sources, 1):.2%}), "
                f"{len(self.far)} equal ones with a score more than the tolerance away, largest score difference "
                f"{self.max_score_diff:.2g}")


def parity(want: dict, got: dict, tolerance: float = 1e-4) -> Parity:
    """Compare the cases of `got` (all_cases() or a slice) with the record `want`; both as compact() gives."""
    found = Parity()
    for name, lists in got.items():
        if name not in want:
            found.missing.append(name)
            continue
        for index, (old, new) in enumerate(zip(want[name], lists, strict=True)):
            found.sources += 1
            if [h[0] for h in old] != [h[0] for h in new]:
                best = lambda hyps: f"{hyps[0][0]} ({hyps[0][1]:.6g})" if hyps else "nothing"  # noqa: E731
                found.differ.append(f"{name} #{index}: want {best(old)} got {best(new)}")
                continue
            found.equal += 1
            for h_old, h_new in zip(old, new):
                for a, b in ((h_old[1], h_new[1]), (h_old[2], h_new[2])):
                    diff = 0.0 if a == b else abs(a - b)  # -inf == -inf
                    found.max_score_diff = max(found.max_score_diff, diff)
                    if diff > tolerance:
                        found.far.append(f"{name} #{index}: {h_old[0]} want {a:.9g} got {b:.9g}")
    return found


def main(argv: list[str]) -> int:
    mode, path, *flags = argv
    got = all_cases()
    if mode == "record":
        Path(path).write_text(json.dumps(compact(got) if "--compact" in flags else got))
        print(f"recorded {len(got)} cases, {sum(len(h) for c in got.values() for h in c)} n-best lists")
        return 0
    want = compact(json.loads(Path(path).read_text()))
    found = parity(want, compact(json.loads(json.dumps(got))))  # the same round trip the record took
    print(found.summary())
    for line in found.differ + found.far + [f"missing: {m}" for m in found.missing]:
        print("  ", line)
    return 0 if found.holds() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
