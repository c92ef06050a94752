"""Sampling decoder: draw each next token from the model's distribution, reshaped by temperature, top-k and
top-p (nucleus, Holtzman et al. 2020), n samples per source; for back-translation and diverse outputs.

The left-to-right loop is the core's (seqxduce.search.greedy_search with a `choose` function): sampling only
replaces the arg-max. One seeded generator serves every batch a decoder sees, so the same sources decoded
with the same settings give the same samples.
"""

from __future__ import annotations

import torch

from seqxduce.api import Decoder, DecodeRequest, Hypothesis, Model
from seqxduce.search import greedy_search
from seqxduce.search_settings import SearchSettings

from .settings import SamplingSettings


def reshape(logprobs: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Scores (N, V) to sample from: log-probs over temperature, all but the top_k (0: all) and all but the
    smallest set of tokens whose probability reaches top_p (1: all) set to -inf; the best token always stays."""
    scores = logprobs / temperature
    if 0 < top_k < scores.size(-1):
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ordered, index = scores.sort(dim=-1, descending=True)  # (N, V)
        probs = ordered.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the better tokens
        drop = before >= top_p
        drop[:, 0] = False
        scores = scores.scatter(1, index, ordered.masked_fill(drop, float("-inf")))
    return scores


class Sampler:
    """The `choose` function for greedy_search: one token per row drawn from the reshaped distribution."""

    def __init__(self, temperature: float, top_k: int, top_p: float, seed: int):
        self.temperature, self.top_k, self.top_p, self.seed = temperature, top_k, top_p, seed
        self.generators: dict[torch.device, torch.Generator] = {}

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self.generators:
            self.generators[device] = torch.Generator(device=device).manual_seed(self.seed)
        return self.generators[device]

    def __call__(self, logprobs: torch.Tensor) -> torch.Tensor:
        """log-probs (N, V) -> sampled token ids (N,)."""
        probs = reshape(logprobs, self.temperature, self.top_k, self.top_p).softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=self._generator(probs.device)).squeeze(1)


def repeat_request(request: DecodeRequest, n: int) -> DecodeRequest:
    """Each source n times in a row (row i*n + j is sample j of source i), its target prefix with it."""
    prefixes = None if request.prefixes is None else [p for p in request.prefixes for _ in range(n)]
    return DecodeRequest(src=request.src.repeat_interleave(n, dim=0),
                         sources=[s for s in request.sources for _ in range(n)],
                         bos_id=request.bos_id, eos_id=request.eos_id, pad_id=request.pad_id, prefixes=prefixes)


class SamplingDecoder(Decoder):
    """n samples per source, returned as its n-best list, highest model log-probability first."""

    def __init__(self, settings: SamplingSettings):
        self.settings = settings
        self.sampler = Sampler(settings.temperature, settings.top_k, settings.top_p, settings.seed)

    def decode(self, model: Model, request: DecodeRequest) -> list[list[Hypothesis]]:
        s, n = self.settings, self.settings.nbest
        # each sample is its own row, so the encoder runs n times per source: simple, and n is small
        rows = greedy_search(model, repeat_request(request, n), SearchSettings.lengths_of(s), choose=self.sampler)
        return [sorted((hyps[0] for hyps in rows[i * n:(i + 1) * n]), key=lambda h: -h.score)
                for i in range(len(request.sources))]
