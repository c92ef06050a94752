"""Validation during training: loss and perplexity on the valid split, and the task's metric on a sample decoded
as [train] valid_search says (the trainer's only tie to decoding): a split of groups (Example.group) samples and
scores each group, and early stopping follows their mean or the group [train] best_group names."""

from __future__ import annotations

import math

import torch

from seqxduce import components
from seqxduce.api import Example, Task, UserError
from seqxduce.components import Tokenizers
from seqxduce.console import format_figures
from seqxduce.corpus.arrays import collate_indices, token_batches
from seqxduce.data import Batch, Pair
from seqxduce.decoding.groups import compact_line, group_names, grouped_figure, sample_per_group
from seqxduce.device import autocast_context
from seqxduce.recipe import Recipe
from seqxduce.training.loss import label_smoothed_nll

# nats a token below which a model that predicts its targets well is said not to read its source: the Multi30k
# model that had collapsed gained 0.00 behind sources of its own language, its bilingual baseline 3.5
# (bench/log/2026-12-08-multilingual-collapse.md). A valid batch that mixes directions moves other tags in with
# the sources, so there the gap counts the wrong language too (that model logged 0.24): not caught yet
SOURCE_GAP_FLOOR = 0.1


class Validator:
    """Scores a model on the valid split of a run's task."""

    def __init__(self, recipe: Recipe, task: Task, tokenizers: Tokenizers, examples: list[Example],
                 pairs: list[Pair], device: torch.device):
        self.recipe, self.settings = recipe, recipe.train
        self.task, self.tokenizers = task, tokenizers
        self.examples, self.pairs = examples, pairs
        self.device = device
        self.primary_metric: str | None = None  # e.g. valid_bleu, once a validation has scored
        self.higher_is_better = True  # the primary metric's direction, as the task's report gives it
        self.best_group = self.settings.best_group
        groups = group_names(examples)
        if self.best_group and self.best_group not in groups:
            known = (f"the valid split's groups are {', '.join(groups)}" if groups
                     else "the task scores its valid split as one set")
            raise UserError(f"[train] best_group = {self.best_group!r}: {known}; name one of them, or leave "
                            "best_group empty to follow the whole split's metric (the mean of its groups)")

    @torch.no_grad()
    def scores(self, model: torch.nn.Module) -> dict[str, float | str]:
        """Loss and perplexity on the valid pairs, and the task's metric on the decoded sample."""
        metrics: dict[str, float | str] = dict(self._loss(model))
        metrics.update(self._metric(model))
        return metrics

    def primary(self, metrics: dict[str, float | str]) -> dict[str, str]:
        """The log's name for the task's main metric, so `seqxduce info` and `plot` know which one it is."""
        return {"primary": self.primary_metric} if self.primary_metric in metrics else {}

    def watched(self, metrics: dict[str, float | str]) -> tuple[str, float, bool]:
        """The figure early stopping and best.pt follow: the task's primary metric when the sample was decoded
        (over the whole split: the mean of its groups; with [train] best_group that group's, valid_bleu[en-de]),
        else the valid loss; with its name and whether higher is better."""
        if self.primary_metric in metrics:
            name = (grouped_figure(self.primary_metric, self.best_group) if self.best_group
                    else self.primary_metric)
            return name, float(metrics[name]), self.higher_is_better
        return "loss", float(metrics["loss"]), False

    def line(self, metrics: dict[str, float | str]) -> str:
        """The progress line's figures: a task's groups folded beside its primary metric (decoding.groups)."""
        return format_figures(compact_line(metrics, self.primary_metric))

    def _loss(self, model: torch.nn.Module) -> dict[str, float]:
        """Loss, nll and perplexity per target token, and source_gap: how much worse (nats a token) each target
        is predicted behind another pair's source of its batch than behind its own. A model that reads its
        source gains a nat or more; one that learned a language model of its targets alone gains nothing (the
        Multi30k model of three target languages with post-norm layers: docs/multilingual.md)."""
        model.eval()
        vocab = self.tokenizers.vocab()
        loss_sum = nll_sum = tokens = 0.0
        own = moved = moved_tokens = 0.0
        for indices in token_batches(self.pairs, self.settings.max_tokens, 0, 0, shuffle=False):
            batch = collate_indices(self.pairs, indices, vocab).to(self.device)
            loss, nll = self._batch_nll(model, batch.src, batch, vocab.pad_id)
            loss_sum, nll_sum, tokens = loss_sum + float(loss), nll_sum + float(nll), tokens + batch.ntokens
            if batch.src.size(0) > 1:  # each row behind the next row's source (a batch of one has no other)
                _, other = self._batch_nll(model, batch.src.roll(1, dims=0), batch, vocab.pad_id)
                own, moved, moved_tokens = own + float(nll), moved + float(other), moved_tokens + batch.ntokens
        nll = nll_sum / max(tokens, 1)
        figures = {"loss": loss_sum / max(tokens, 1), "nll": nll, "ppl": math.exp(min(nll, 100.0))}
        if moved_tokens:
            figures["source_gap"] = (moved - own) / moved_tokens
        return figures

    def _batch_nll(self, model: torch.nn.Module, src: torch.Tensor, batch: Batch,
                   pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's summed label-smoothed loss and nll of its targets behind `src`."""
        with autocast_context(self.device, self.settings.precision):
            out = model(src, batch.tgt_in)
        return label_smoothed_nll(out.logits, batch.tgt_out, self.settings.label_smoothing, pad_id)

    def notice(self, metrics: dict[str, float | str]) -> str:
        """A line when the model predicts its targets well but not from its source: a valid nll below half a
        uniform guess's over the vocabulary, and under SOURCE_GAP_FLOOR nats a token gained from the source
        (early in training both are small together, so no notice then); "" otherwise."""
        gap, nll = metrics.get("source_gap"), metrics.get("nll")
        if not isinstance(gap, float) or not isinstance(nll, float):
            return ""
        if gap >= SOURCE_GAP_FLOOR or nll >= 0.5 * math.log(max(self.tokenizers.vocab().tgt_size, 2)):
            return ""
        return (f"notice: the model predicts its targets ({nll:.2f} nats a token) but hardly from its sources "
                f"(source_gap {gap:.3f}: a target behind another pair's source is predicted as well as behind "
                "its own); it has learned a language model of its targets. docs/engineering.md says what to check")

    def _metric(self, model: torch.nn.Module) -> dict[str, float | str]:
        from seqxduce.decoding.decode import DecodeParts, decode_sources, score_outputs
        from seqxduce.decoding.search import GreedyDecoder
        from seqxduce.decoding.search_settings import SearchSettings

        sample = sample_per_group(self.examples, self.settings.valid_decode_examples)
        if not sample:
            return {}
        recipe_search = self.settings.valid_search == "recipe"
        decode = self.recipe.decode
        decoder = (components.build_decoder(self.recipe, self.tokenizers) if recipe_search
                   else GreedyDecoder(SearchSettings.lengths_of(decode.settings)))
        parts = DecodeParts(self.recipe, self.task, self.tokenizers, model, decoder, self.device)
        outputs = decode_sources(parts, sample)
        report = score_outputs(self.task, outputs, sample)
        self.primary_metric = f"valid_{report.primary}"
        self.higher_is_better = report.higher_is_better
        metrics: dict[str, float | str] = {"search": decode.core.name if recipe_search else "greedy"}
        metrics.update({f"valid_{k}": v for k, v in report.metrics.items()})
        return metrics
