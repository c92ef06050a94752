"""One road for changing how a run decodes: decode's flags (--beam, --nbest, --batch-tokens, --device,
--precision), serve's per-request fields and the interactive commands' --nbest all change the recipe's decode
settings here.

Each change carries the name the user gave it by (`--beam`, or a request's field `beam`), so that a value out of
its declared range is refused naming that, from the setting's own check (SettingError keeps the key), never by
reading an error's text back. Torch-free: serve checks a request's changes before any model work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seqxduce.api import Settings, UserError
from seqxduce.console import console
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.recipe import Recipe
from seqxduce.settings_check import SettingError

# the keys of the recipe's [decode] section (the core's) and [train] that decoding may be given; every other key
# of a change is the decoder plugin's
CORE_KEYS = ("batch_size", "batch_tokens", "precision")
TRAIN_KEYS = ("device",)


@dataclass(frozen=True)
class Change:
    """One decode setting to change: the key (`beam`, `batch_tokens`, `device`), its value, and how the user gave
    it (`--beam`, or a serve request's field `beam`), which a refusal names."""

    key: str
    value: Any
    given_as: str

    def refused(self, problem: str) -> UserError:
        """The one-line refusal of this change: `--beam: 0 is out of range; ...`, or a request's `beam: 0 ...`."""
        return UserError(f"{self.given_as}: {self.value!r} {problem}")


def flag_changes(**flags: Any) -> list[Change]:
    """Changes from command-line flags named by their keys (batch_tokens -> --batch-tokens); None = not given."""
    return [Change(key, value, "--" + key.replace("_", "-")) for key, value in flags.items() if value is not None]


def changed_settings(settings: Settings | None, changes: Sequence[Change], decoder: str) -> Settings | None:
    """The decoder's settings with `changes` (all of them the decoder's keys) applied and checked: a key the
    decoder does not declare, or a value out of its range, is one line naming the flag or field it came from."""
    if not changes:
        return settings
    declared = {f.name for f in dataclasses.fields(settings)} if settings is not None else set()
    for change in changes:
        if change.key not in declared:
            raise change.refused(f"is not for decoder {decoder!r}, which has no setting {change.key!r} (its "
                                 f"settings: {', '.join(sorted(declared)) or 'none'})")
    given = {change.key: change for change in changes}
    try:
        return dataclasses.replace(settings, **{change.key: change.value for change in changes})
    except SettingError as err:
        change = given.get(err.key, Change(err.key, err.value, f"[decode] {err.key}"))
        raise change.refused(err.problem) from None
    except UserError as err:  # a rule between keys (validate()): name every change made
        raise UserError(f"{', '.join(f'{c.given_as} {c.value!r}' for c in changes)}: {err}") from None


def nbest_changes(settings: Settings | None, nbest: int, decoder: str, given_as: str = "--nbest") -> list[Change]:
    """What `nbest` hypotheses per source asks of the decoder: its nbest, and a beam widened to hold them (a
    narrower beam cannot return more); [] when the decoder already gives that many. One output per source (a
    decoder without n-best) is refused for nbest > 1, naming the fix."""
    shape = SearchShape.of(settings)
    if nbest == shape.nbest:
        return []
    if not shape.has_nbest:
        if nbest <= 1:
            return []
        raise Change("nbest", nbest, given_as).refused(
            f"asks for several outputs, but decoder {decoder!r} gives one output per source; add --set "
            "decode.name=beam (or sampling)")
    changes = [Change("nbest", nbest, given_as)]
    if shape.has_beam and shape.beam < nbest:
        changes.append(Change("beam", nbest, given_as))
    return changes


@dataclass(frozen=True)
class SearchShape:
    """What callers outside the decoder need of its settings (the CTranslate2 path, serve's page, the n-best
    flags), read through the core's search settings classes rather than by attribute name: a decoder whose
    settings do not extend BeamSettings (greedy) keeps one hypothesis, no length penalty."""

    beam: int = 1
    alpha: float = 0.0
    form: str = "gnmt"  # the length penalty's form (BeamSettings.length_penalty)
    nbest: int = 1
    has_beam: bool = False  # the settings declare a beam width
    has_nbest: bool = False  # the settings declare how many hypotheses a source returns

    @classmethod
    def of(cls, settings: Settings | None) -> SearchShape:
        if not isinstance(settings, SearchSettings):
            return cls()
        beam = isinstance(settings, BeamSettings)
        return cls(beam=settings.beam if beam else 1, alpha=settings.alpha if beam else 0.0,
                   form=settings.length_penalty if beam else "gnmt", nbest=settings.returned(), has_beam=beam,
                   has_nbest=settings.returns_nbest)


def with_changes(recipe: Recipe, changes: Sequence[Change]) -> Recipe:
    """The recipe with decode-time changes applied: [decode]'s batching, [train] device, and the decoder's own
    settings (an `nbest` change as nbest_changes says); each checked as its section checks it, a refusal naming
    the flag or field."""
    core = [c for c in changes if c.key in CORE_KEYS]
    train = [c for c in changes if c.key in TRAIN_KEYS]
    nbest = [c for c in changes if c.key == "nbest"]
    own = [c for c in changes if c.key not in (*CORE_KEYS, *TRAIN_KEYS, "nbest")]
    decode = recipe.decode
    if core:
        decode = dataclasses.replace(decode, core=_replaced(decode.core, core))
    settings = changed_settings(decode.settings, own, decode.core.name)
    for change in nbest:  # after the others: a beam given beside it is widened only when it is too narrow
        widened = nbest_changes(settings, change.value, decode.core.name, change.given_as)
        beam = next((c.value for c in widened if c.key == "beam"), None)
        if beam is not None:
            console.print(f"note: beam {SearchShape.of(settings).beam} -> {beam} to give {beam} hypotheses")
        settings = changed_settings(settings, widened, decode.core.name)
    decode = dataclasses.replace(decode, settings=settings)
    return dataclasses.replace(recipe, decode=decode,
                               train=_replaced(recipe.train, train) if train else recipe.train)


def _replaced(settings: Any, changes: Sequence[Change]) -> Any:
    try:
        return dataclasses.replace(settings, **{change.key: change.value for change in changes})
    except SettingError as err:
        raise next(c for c in changes if c.key == err.key).refused(err.problem) from None
