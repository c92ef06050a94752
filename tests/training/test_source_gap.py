"""Validation's source_gap (issue #77's defect: a Multi30k model of three target languages learned a language
model per tag and nothing of its source, and every figure validation logged looked like slow training): how much
worse each valid target is predicted behind another pair's source than behind its own, and the notice the
progress line gets when a model predicts its targets well but not from its sources."""

from __future__ import annotations

import math

import torch

from seqxduce.components import data_dir
from seqxduce.engine import load_run
from seqxduce.training.run import encode
from seqxduce.training.validation import SOURCE_GAP_FLOOR, Validator


class Blind(torch.nn.Module):
    """A model that reads every target behind the same source, end-of-sentence ids as long as the batch's: whatever
    the source, it predicts the same (a model that ignores its source, made on purpose)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor):
        return self.model(self.blind(src), tgt_in)

    def encode(self, src: torch.Tensor, *args):  # validation's decoded sample reads the same blind memory
        return self.model.encode(self.blind(src), *args)

    def blind(self, src: torch.Tensor) -> torch.Tensor:
        return torch.full_like(src, self.model.vocab.eos_id)

    def __getattr__(self, name: str):  # the rest of the Model interface is the wrapped model's
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.model, name)


def validator_of(run) -> tuple[Validator, torch.nn.Module]:
    loaded = load_run(run)
    examples = loaded.task.examples("valid", data_dir(loaded.recipe))
    pairs = encode(loaded.recipe, loaded.tokenizers, examples, "valid")
    return Validator(loaded.recipe, loaded.task, loaded.tokenizers, examples, pairs, torch.device("cpu")), loaded.model


def test_a_model_that_reads_its_source_gains_from_it_and_one_that_does_not_gains_nothing(trained_copy_run):
    validator, model = validator_of(trained_copy_run)
    reads = validator.scores(model)
    blind = validator.scores(Blind(model))
    # the copy model predicts each token from its source: behind another's it is lost
    assert reads["source_gap"] > 1.0, reads
    assert abs(blind["source_gap"]) < 1e-4 and blind["nll"] > reads["nll"], blind  # the same source either way
    assert "source_gap" in validator.line(reads)  # on the progress line, beside loss and the task's metric
    assert validator.notice(reads) == ""


def test_the_notice_names_a_model_that_predicts_its_targets_without_its_source(trained_copy_run):
    validator, _ = validator_of(trained_copy_run)
    uniform = math.log(validator.tokenizers.vocab().tgt_size)
    blind = {"nll": 0.3 * uniform, "source_gap": 0.01}
    notice = validator.notice(blind)
    assert "hardly from its sources" in notice and "source_gap 0.010" in notice and "\n" not in notice
    # early in training both figures are small together: no notice while the targets are not predicted yet
    assert validator.notice({"nll": 0.6 * uniform, "source_gap": 0.01}) == ""
    assert validator.notice({"nll": 0.3 * uniform, "source_gap": SOURCE_GAP_FLOOR}) == ""
    assert validator.notice({"nll": 0.3 * uniform}) == ""  # a valid split of one-pair batches has no gap
