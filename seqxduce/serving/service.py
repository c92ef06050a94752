"""The loaded run as the server uses it: which decode keys a request may change, a decoder per set of changes, a
batch of sources decoded exactly as `seqxduce decode` decodes them, and the attention maps of one output.

Everything task-specific goes through the same hooks `decode` uses (the task's postprocess, the tokenizers, the
decoder plugin); nothing here knows a task. decode() and attention() run in the batcher's one worker thread.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqxduce.api import Decoder, Example, Phrases, UserError
from seqxduce.components import build_decoder
from seqxduce.data import encode_source
from seqxduce.decoding.changes import Change, SearchShape, changed_settings, nbest_changes
from seqxduce.decoding.decode import LoadedRun, Output, decode_sources, encode_prefixes
from seqxduce.decoding.directions import Directions
from seqxduce.decoding.phrases import PhraseText
from seqxduce.decoding.search import stop_when
from seqxduce.decoding.search_settings import SearchSettings
from seqxduce.serving.batching import StopCheck
from seqxduce.serving.limits import DecodeAsk, Lengths, Prefixed, RequestError, source_text
from seqxduce.settings_check import request_keys

DECODERS_KEPT = 16  # decoders built for requests' own settings, the least recently used dropped first


@dataclass(frozen=True)
class Asked:
    """A request's decode settings, checked once: the changes it makes (what batches are keyed by: requests
    asking the same share them) and the settings they give (what its decoder is built from and its cost computed
    from; not part of the key, which the changes decide)."""

    changes: tuple[tuple[str, Any], ...] = ()
    settings: Any = field(default=None, compare=False, hash=False)


def model_positions(model: Any) -> int | None:
    """The sequence length the model was built for (Model.positions_limit), if it declares one."""
    declared = model.positions_limit
    return int(declared) if declared is not None and declared > 0 else None


def hypotheses(output: Output) -> list[dict[str, Any]]:
    """One source's answer as `seqxduce decode` prints it (engine.format_outputs): the task's postprocessed
    output alone, or with n-best each hypothesis's decoded text before postprocessing, with its score."""
    if len(output.nbest) <= 1:
        score = float(output.nbest[0][1].score) if output.nbest else 0.0
        return [{"text": output.text, "score": score}]
    return [{"text": text, "score": float(hyp.score)} for text, hyp in output.nbest]


class Service:
    """One loaded run (a model or an ensemble) and the decoders requests ask for."""

    def __init__(self, run: LoadedRun):
        self.run = run
        self.settings = run.recipe.decode.settings
        self.decoders: OrderedDict[Asked, Any] = OrderedDict()  # decoders (an engine's own: CT2Service)
        self.lock = threading.Lock()  # the event loop checks a request's decoder while the worker uses another

    def decode_keys(self) -> dict[str, Any]:
        """The [decode] keys a request may set, with their values: those the decoder plugin's settings declare
        `per_request` (scalars only; nbest is a key of its own). Keys that must agree with the task or the model
        (tree_beam's words_in_target) are not declared so, and stay the recipe's."""
        return {name: getattr(self.settings, name) for name in request_keys(self.settings) if name != "nbest"}

    def lengths(self, key: Asked) -> Lengths:
        """The output length limits and hypotheses per source of a request's checked settings (a decoder without
        length settings searches with SearchSettings' defaults, as sampling does), read through the search's typed
        shape (SearchSettings.lengths_of, SearchShape)."""
        base = SearchSettings.lengths_of(key.settings)
        shape = SearchShape.of(key.settings)
        if shape.has_beam:
            rows_key, rows = "beam", max(shape.beam, shape.nbest)
        elif shape.has_nbest:  # a sampler draws nbest rows per source
            rows_key, rows = "nbest", shape.nbest
        else:
            rows_key, rows = "nbest", 1
        return Lengths(base.max_len_a, base.max_len_b, base.min_len, rows, rows_key)

    def target_tokens(self, target: str) -> int:
        """A given output's length as the model reads it (its tokens and eos)."""
        return len(self.run.tokenizers.tgt.encode(target)) + 1

    def default_nbest(self) -> int:
        """Hypotheses per source when a request does not say: as many as the recipe's decoder gives."""
        return SearchShape.of(self.settings).nbest

    def source_tokens(self, source: str) -> int:
        """A source's length as the model reads it (its tokens and eos)."""
        return len(encode_source(self.run.tokenizers.src, source))

    def key_for(self, ask: DecodeAsk) -> Asked:
        """A request's settings checked once (4xx when out of range, or when the decoder gives one output per
        source and nbest > 1), as the key its batches share with other requests that ask the same; its decoder is
        built now, so that a value the decoder refuses is the request's error, not the batch's."""
        changes = [Change(key, value, key) for key, value in ask.changes.items()]  # refusals name the field
        name = self.run.recipe.decode.core.name
        try:
            settings = changed_settings(self.settings, changes, name)
            # as `decode --nbest` does: the decoder's nbest, and a beam widened to hold them
            widened = nbest_changes(settings, ask.nbest, name, given_as="nbest") if ask.nbest else []
            settings = changed_settings(settings, widened, name)
        except UserError as err:
            raise RequestError(422, str(err)) from None
        key = Asked(tuple(sorted({c.key: c.value for c in [*changes, *widened]}.items())), settings)
        self.decoder(key)
        return key

    def directed(self, ask: DecodeAsk) -> tuple[list[str | Prefixed], list[str]]:
        """Each input as the model reads it for the language the request ("tgt_lang") or the input chose
        (decoding/directions.py: the task's tag in the source, or a target prefix the search forces and the
        request's cost counts as any prefix), and the task's notices; one the run does not know is a 422 naming
        the field and the languages it knows."""
        own = [s.tgt_lang if isinstance(s, Prefixed) else "" for s in ask.inputs]
        if not ask.tgt_lang and not any(own):
            if ask.src_lang:
                raise RequestError(422, "src_lang: the source language is stated with a target language; send "
                                        "tgt_lang too")
            return list(ask.inputs), []
        directions = Directions(self.run.task, ask.src_lang)
        inputs: list[str | Prefixed] = []
        for i, (given, lang) in enumerate(zip(ask.inputs, own)):
            example = Example(source_text(given), "", prefix=given.prefix if isinstance(given, Prefixed) else "")
            try:
                read = directions.apply(example, lang or ask.tgt_lang, f"inputs[{i}].tgt_lang" if lang else "tgt_lang")
            except UserError as err:
                raise RequestError(422, str(err)) from None
            phrases = given.constraints if isinstance(given, Prefixed) else ()
            inputs.append(Prefixed(read.source, read.prefix, constraints=phrases) if read.prefix or phrases
                          else read.source)
        return inputs, directions.notices

    def phrase_tokens(self, inputs: Sequence[str | Prefixed], key: Asked) -> list[int]:
        """Per input, the tokens of its phrases that must appear (0 for none): the search raises the input's
        output limit to leave room for them (search._room), so the request's cost counts them as it counts a
        prefix. Checked now, before anything is queued, each refusal a 422 naming inputs[i].constraints: more
        phrases that must appear than the request's beam keeps apart, a phrase the target vocabulary cannot
        spell, or one the engine cannot search for (refuse_phrases)."""
        beam = max(SearchShape.of(key.settings).beam, 1)  # greedy search keeps one phrase's bank: 1
        needed = []
        for i, given in enumerate(inputs):
            where = f"inputs[{i}].constraints"
            phrases = _phrase_text(given, where)
            if not phrases:
                needed.append(0)
                continue
            self.refuse_phrases(phrases, where)
            if len(phrases.include) > beam:
                raise RequestError(422, f"{where}: {len(phrases.include)} phrases must appear, more than the beam "
                                        f"({beam}) can keep apart (at most one per beam entry); send at most "
                                        f"{beam}, or a larger \"beam\"")
            needed.append(_encoded(phrases, self.run.tokenizers.tgt, where).tokens_needed())
        return needed

    def refuse_phrases(self, phrases: PhraseText, where: str) -> None:
        """A 422 naming `where` when this engine cannot search for an input's phrases; seqxduce's own search
        takes both kinds."""

    def forced(self, steps: int) -> Asked:
        """The settings that force every output to `steps` tokens (serving.pace's probe): a RequestError when the
        decoder has no min_len or length limits to force them with."""
        return self.key_for(DecodeAsk([], 0, {"min_len": steps, "max_len_a": 0.0, "max_len_b": steps}))

    def probe(self, sources: Sequence[str], steps: int) -> None:
        """Decode sources with every output `steps` tokens long: serving.pace times it."""
        self.decode(sources, self.forced(steps))

    def probe_source(self, tokens: int) -> str:
        """A source of about `tokens` tokens as the model reads it, for the probe (its words do not matter)."""
        words = 1
        while self.source_tokens(" ".join(["a"] * words)) < tokens and words < 4 * tokens:
            words += 1
        return " ".join(["a"] * words)

    def decoder(self, key: Asked) -> Any:
        """The decoder for a key of key_for (the run's own for no change), built once and kept."""
        if not key.changes:
            return self.unchanged()
        with self.lock:
            if key in self.decoders:
                self.decoders.move_to_end(key)
                return self.decoders[key]
        try:
            decoder = self.build(key.settings)
        except UserError as err:
            raise RequestError(422, str(err)) from None
        with self.lock:
            self.decoders[key] = decoder
            if len(self.decoders) > DECODERS_KEPT:
                self.decoders.popitem(last=False)
        return decoder

    def unchanged(self) -> Decoder:
        """What decodes a request that changes no setting."""
        return self.run.decoder

    def build(self, settings: Any) -> Decoder:
        """What decodes with a request's settings: the decoder plugin's own, built through the contract check
        every decoder is built through (components.build_decoder)."""
        recipe = self.run.recipe
        return build_decoder(dataclasses.replace(recipe, decode=dataclasses.replace(recipe.decode, settings=settings)),
                             self.run.tokenizers)

    def described(self) -> str:
        """What is served, as the server's first lines say it."""
        return self.run.described()

    def positions(self) -> int | None:
        """The sequence length the model was built for (Model.positions_limit), if it declares one: the default
        of the server's length limits."""
        return model_positions(self.run.model)

    def served(self) -> dict[str, Any]:
        """/v1/info's "serve" facts of what is loaded."""
        return {"checkpoint": str(self.run.checkpoint), "ensemble": [str(p) for p in self.run.members]}

    def facts(self, run: Path) -> dict[str, Any]:
        """/v1/info: what `seqxduce info` shows of the run served."""
        from seqxduce.inspection.run_info import run_info

        return run_info(run).as_dict()

    def decode(self, sources: Sequence[str | Prefixed], key: Asked, stop: StopCheck | None = None) -> list[Any]:
        """Decode one batch as `seqxduce decode` does. The search checks stop() between its steps and ends
        (SearchStopped) once it is true."""
        with stop_when(stop or _never):
            return self.answers(sources, key)

    def answers(self, sources: Sequence[str | Prefixed], key: Asked) -> list[Any]:
        """Each source's answer; a source the model or task refuses (a UserError, e.g. longer than learned
        positions reach) gets a 422 of its own and the others are decoded without it."""
        try:
            return [hypotheses(o) for o in self._decode(sources, key)]
        except UserError as err:
            if len(sources) == 1:
                return [RequestError(422, f"inputs: {source_text(sources[0])[:40]!r}: {err}")]
        return [self._one(s, key) for s in sources]

    def _decode(self, sources: Sequence[str | Prefixed], key: Asked) -> list[Output]:
        run = self.run
        tgt = run.tokenizers.tgt
        return decode_sources(run, [source_text(s) for s in sources], self.decoder(key),
                              prefixes=self._prefixes(sources, tgt), constraints=self._constraints(sources, tgt))

    @staticmethod
    def _prefixes(sources: Sequence[str | Prefixed], tokenizer: Any) -> list[list[int]] | None:
        """Each input's "prefix" (the target text its output starts with) as ids; None when no input has one (as
        a Python call without prefixes decodes)."""
        if not any(isinstance(s, Prefixed) and s.prefix for s in sources):
            return None
        return encode_prefixes(tokenizer, [s.prefix if isinstance(s, Prefixed) else "" for s in sources], "prefix ")

    @staticmethod
    def _constraints(sources: Sequence[str | Prefixed], tokenizer: Any) -> list[Phrases] | None:
        """Each input's constraints as ids, empty for an input without (a batch mixes clients' inputs: each keeps
        its own); None when no input of the batch has any, as a Python call without constraints decodes."""
        given = [_phrase_text(s, f"inputs[{i}].constraints") for i, s in enumerate(sources)]
        if not any(given):
            return None
        return [_encoded(p, tokenizer, f"inputs[{i}].constraints") for i, p in enumerate(given)]

    def _one(self, source: str | Prefixed, key: Asked) -> Any:
        try:
            return hypotheses(self._decode([source], key)[0])
        except UserError as err:
            return RequestError(422, f"inputs: {source_text(source)[:40]!r}: {err}")

    def attention(self, source: str, target: str | None, key: Asked, stop: StopCheck | None = None
                  ) -> dict[str, Any]:
        """The encoder-decoder attention of source and its output (the decoder's best, or `target`), per layer
        averaged over heads, with the tokens on both axes (what `seqxduce attention` draws)."""
        from seqxduce.inspection.attention_maps import attention_view

        run = dataclasses.replace(self.run, decoder=self.decoder(key))
        try:
            with stop_when(stop or _never):
                view = attention_view(run, source, target)
        except UserError as err:
            raise RequestError(422, f"model: {err}") from None
        return {
            "source_tokens": view.source_tokens, "output_tokens": view.output_tokens, "output_text": view.output_text,
            "unit": view.unit,
            "cross": [[[round(float(v), 4) for v in row] for row in layer.mean(dim=0).tolist()]
                      for layer in view.maps["cross"]],
        }


def _never() -> bool:
    return False


def _phrase_text(given: str | Prefixed, where: str) -> PhraseText:
    """An input's constraints as decoding.phrases reads them (limits.check_constraints checked them: a refusal
    here is still the client's 422, never a 500)."""
    if not isinstance(given, Prefixed) or not given.constraints:
        return PhraseText()
    try:
        return PhraseText.from_list(given.constraints, where)
    except UserError as err:
        raise RequestError(422, str(err)) from None


def _encoded(phrases: PhraseText, tokenizer: Any, where: str) -> Phrases:
    """The phrases as target ids; one the vocabulary cannot spell is the client's 422 naming `where`."""
    if not phrases:
        return Phrases()
    try:
        return phrases.encode(tokenizer, where)
    except UserError as err:
        raise RequestError(422, str(err)) from None


def native_service(engine: Any, run: LoadedRun) -> Service:
    """seqxduce's engine's service (SeqxduceEngine.service names it): the run it loaded."""
    return Service(run)
