"""The contracts that plugins implement, and the small value types that flow between them.

Everything the core asks of a plugin is here: the Task, Tokenizer, Model and Decoder classes (their abstract
methods must be written, the others may be overridden), the factories a `register(...)` callback takes, the
Settings base class of a component's settings, and StepConstraint for decoders. This module must stay importable
without torch: `seqxduce --help` and `seqxduce plugins` read it. Tensor types are named in strings only.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from seqxduce.errors import TrainingStopped, UserError
from seqxduce.settings_check import Settings, check_settings, setting, setting_like

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["UserError", "TrainingStopped", "Settings", "setting", "setting_like", "check_settings", "Example",
           "Direction", "Directed", "Output", "PairScore",
           "Hypothesis", "Postprocessed", "Report", "VocabInfo", "ModelOutput", "Task", "Tokenizer", "Model",
           "StepConstraint", "Phrases", "DecodeRequest", "Decoder", "TaskFactory", "TokenizerFactory", "ModelFactory",
           "DecoderFactory", "read_lines", "Importer", "ImportedModel", "ImporterFactory"]


# ---------------------------------------------------------------- value types


@dataclass
class Example:
    """One raw example of a task: the source and target text, and the reference the metric scores against."""

    source: str
    target: str
    reference: str | None = None  # defaults to target; a parse task keeps the gold tree here
    # further references of the same source (a test set translated several times), scored with ref by
    # Task.score_references; the same number in every example of a split
    more_references: tuple[str, ...] = ()
    # the training corpus the example comes from, for a task with several (Task.corpus_weights): batches are
    # drawn across them by temperature; "" for a task with one
    corpus: str = ""
    # target text the output is forced to start with (a language tag a multilingual task writes at the start of
    # its targets); "" for none
    prefix: str = ""
    # the part of a valid or test split the example is scored in (a multilingual task's direction, en-de): the
    # task's metric is reported per group and as their mean (decoding/groups.py); "" for a split scored as one
    group: str = ""

    @property
    def ref(self) -> str:
        return self.target if self.reference is None else self.reference


@dataclass(frozen=True)
class Direction:
    """What a user chooses of a model that writes several kinds of output, where the model is used: a multilingual
    translation's target language (`decode --tgt-lang`, a file's column, a serve request's "tgt_lang"). The core
    passes it through as text; the task interprets it (Task.directed)."""

    target: str
    source: str = ""  # the kind of the source where the user states it (`--src-lang`); "" for unknown


@dataclass(frozen=True)
class Directed:
    """An example as the model reads it for a Direction (Task.directed), and a notice for the user: one line the
    command says once (a direction the model was never trained on); "" for none."""

    example: Example
    notice: str = ""


@dataclass
class Hypothesis:
    """One decoded output: token ids (no bos/eos), its total log-probability and its length-normalised score."""

    tokens: list[int]
    score: float
    logprob: float
    positional_logprobs: list[float] = field(default_factory=list)


@dataclass
class Output:
    """One decoded source, as an engine's decode gives it: the task-formatted best output and the n-best (text,
    hypothesis) pairs, best first."""

    source: str
    text: str
    nbest: list[tuple[str, Hypothesis]] = field(default_factory=list)
    reference: str | None = None
    annotations: dict[str, list] = field(default_factory=dict)  # per-position figures (decode --annotations)
    figures: dict[str, float] = field(default_factory=dict)  # what the task's postprocess said of its output


@dataclass(frozen=True)
class PairScore:
    """The score of one given pair, as an engine's score gives it: the target's total log-probability (natural
    log) over its tokens and eos."""

    logprob: float
    length: int  # target tokens + 1 for eos: the positions summed
    normalized: float  # logprob / GNMT length penalty of `length`, with the run's [decode] alpha (beam's score)

    @property
    def per_token(self) -> float:
        """The mean log-probability per position (eos counted), fairseq's --score-reference score."""
        return self.logprob / self.length


@dataclass
class Postprocessed:
    """A task's output for one decoded hypothesis, with figures on how it was made (e.g. repairs) for its score."""

    text: str
    figures: dict[str, float] = field(default_factory=dict)


@dataclass
class Report:
    """A metric report: named figures (`primary` the main one, better when higher unless higher_is_better is
    False, e.g. an error rate) and a text block to print.

    invalid counts the outputs the metric could not score and left out of its figures (e.g. a parser's output
    that is not a tree): the CLI then prints `warning` (one line naming them) and exits non-zero unless the user
    accepts them with --allow-errors.
    """

    metrics: dict[str, float]
    primary: str
    text: str = ""
    signature: str = ""
    invalid: int = 0
    warning: str = ""
    higher_is_better: bool = True  # the primary metric's direction: early stopping and best.pt follow it
    # the figures a table of scores per group shows, by their label ({"bleu": "BLEU", "chrf": "chrF"}); empty:
    # the primary alone
    table: dict[str, str] = field(default_factory=dict)


@dataclass
class AttentionWeights:
    """Attention probabilities of one teacher-forced pass, per kind one (B, H, Lq, Lk) tensor per layer.

    `unit` names what the list index counts: "layer", or "depth step" for a model that applies one layer
    repeatedly (the Universal Transformer). Rows are queries, columns keys; each row sums to 1 over real keys.
    """

    encoder: list[torch.Tensor]  # source self-attention, (B, H, S, S) per layer
    decoder: list[torch.Tensor]  # causal target self-attention, (B, H, T, T) per layer
    cross: list[torch.Tensor]  # encoder-decoder attention, targets over sources, (B, H, T, S) per layer
    unit: str = "layer"

    def of(self, kind: str) -> list[torch.Tensor]:
        """The tensors of one kind: encoder, decoder or cross."""
        return {"encoder": self.encoder, "decoder": self.decoder, "cross": self.cross}[kind]


@dataclass(frozen=True)
class VocabInfo:
    """What a model factory needs to know about the vocabularies it embeds."""

    src_size: int
    tgt_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    shared: bool
    # the source vocabulary's entries by id, for a model that composes an entry's embedding from its spelling
    # (empty where the builder did not give them)
    src_tokens: tuple[str, ...] = ()


@dataclass
class ExportRequest:
    """What Model.export() writes: the model for another inference engine, with the run's vocabularies by id."""

    engine: str  # e.g. "ctranslate2"
    directory: Path  # an existing, empty folder
    source_tokens: tuple[str, ...]  # the source vocabulary's entries by id
    target_tokens: tuple[str, ...]
    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int
    quantization: str = "none"  # the engine's weight type, e.g. int8, float16; none keeps float32
    decoder: str = ""  # the run's [decode] name, for an engine that keeps generation defaults (huggingface)
    search: Any = None  # the run's [decode] settings (a SearchSettings or BeamSettings, or a plugin's)
    notes: list[str] = field(default_factory=list)  # what the export could not say exactly (the model card's)


@dataclass
class ModelOutput:
    """A model's training forward: logits (B, T, V) and optional extra loss (e.g. ACT's ponder cost).

    stats are figures for the training log: a name ending in `_max` is reduced by maximum over
    accumulated batches, ranks and log steps, any other name by mean. A value may be a 0-dim tensor: the
    trainer sums it on the device and reads it at log time, where a float() in the model would make every
    step wait for the GPU.
    """

    logits: torch.Tensor
    aux_loss: torch.Tensor | None = None
    stats: dict[str, float | torch.Tensor] = field(default_factory=dict)


# ---------------------------------------------------------------- contracts


class Task(abc.ABC):
    """Where data comes from, how raw examples become text and back, and how outputs are scored."""

    splits: tuple[str, ...] = ("train", "valid", "test")
    # what a group of a split (Example.group) is, as a table of scores per group heads its first column
    group_name: str = "group"

    def prepare(self, data_dir: Path) -> None:  # noqa: B027 - optional hook
        """Download or build the task's data under data_dir; a second call does nothing."""

    @abc.abstractmethod
    def examples(self, split: str, data_dir: Path) -> list[Example]:
        """Return the examples of one split."""

    def stream(self, split: str, data_dir: Path) -> Iterator[Example]:
        """The split's examples one at a time, as examples() returns them: preparing a run's training data reads
        the training split this way (twice: the tokenizer's training, then the encoding), so a task that reads
        files line by line here never holds a corpus of millions of pairs. The default yields examples()."""
        yield from self.examples(split, data_dir)

    def data_files(self, split: str, data_dir: Path) -> list[Path] | None:
        """The files a split's examples are read from, if the task reads files: a prepared training set is then
        known by their names, sizes and times without reading them (None: by the text of the examples)."""
        return None

    def corpus_weights(self) -> dict[str, float]:
        """The training corpora of a task that has several, by the name its training examples carry
        (Example.corpus), in the order the training split streams them, each with its weight: batches are drawn
        across them with p_i proportional to weight_i * n_i^(1/T) ([train] sampling_temperature). Empty (the
        default): one corpus, batched as it always was."""
        return {}

    def reserved_symbols(self) -> tuple[str, ...]:
        """Strings the task writes into its texts (a multilingual task's language tags) that a tokenizer which
        learns its vocabulary must keep as one piece each, never split and never sampled apart."""
        return ()

    def directed(self, example: Example, direction: Direction) -> Directed:
        """The example (a source, with a target when scoring and a prefix when given one) as the model reads it
        when the user chooses the kind of its output (a multilingual model's target language), written as the
        task's own examples of that direction are written (a tag in the source, or a target prefix that decoding
        forces and postprocess drops). A direction the task does not know: a UserError saying which it knows (the
        caller puts where it was given in front). The default: a task whose outputs are of one kind, which has
        nothing to choose."""
        raise UserError(f"the {direction.target!r} chosen: task {type(self).__name__} writes one kind of output and "
                        "has no direction to choose; leave the language out")

    def as_teacher_of(self, student: Task) -> str:
        """Whether a model trained on this task's examples (a distillation teacher) reads the training examples of
        `student` as they are written (their sources, and the target prefixes decoding forces, Example.prefix): a
        UserError saying what differs and how to fix it when it does not (a multilingual teacher that reads a tag
        the student's sources lack), else a notice for the user ("" for none). The default: any student."""
        return ""

    def for_group(self, group: str) -> Task:
        """The task that scores the outputs of one group of a split (Example.group), e.g. a multilingual task's
        one-direction task, whose metric knows its target language; the default scores every group as itself."""
        return self

    def postprocess(self, hypothesis: str, source: str) -> Postprocessed:
        """Turn decoded target text into the task's output format (e.g. a linearized tree into a tree)."""
        return Postprocessed(hypothesis)

    def training_target(self, hypothesis: str, source: str) -> str:
        """Decoded target text written as this task's training targets are (the `target` of its examples), so that
        a model trains on it: the targets of a distillation and of `decode --as-targets`. The default is the text
        itself; a task whose targets are not its outputs writes them back (parsing: the tree, linearized again
        with the source's words where the target vocabulary has only their classes)."""
        return hypothesis

    @abc.abstractmethod
    def score(self, hypotheses: list[str], references: list[str], sources: list[str] | None = None) -> Report:
        """Score outputs (postprocessed, or read from a file) against references."""

    def score_outputs(self, outputs: Sequence[Postprocessed], references: list[str],
                      sources: list[str] | None = None) -> Report:
        """Score what postprocess() gave, its figures included; the default scores the texts alone."""
        return self.score([o.text for o in outputs], references, sources)

    def score_references(self, hypotheses: list[str], references: list[list[str]],
                         sources: list[str] | None = None) -> Report:
        """Score outputs against several references: references[k][i] is the k-th reference of output i (as
        sacreBLEU takes them). The default scores against one reference only, and refuses more."""
        if len(references) != 1:
            raise UserError(f"task {type(self).__name__} scores against one reference, {len(references)} were given; "
                            "give one reference file")
        return self.score(hypotheses, references[0], sources)

    def score_files(self, hypothesis_file: Path, reference_file: Path) -> Report:
        """Score two files of one output per line (`seqxduce evaluate`)."""
        hyps = read_lines(hypothesis_file)
        refs = read_lines(reference_file)
        if len(hyps) != len(refs):
            raise UserError(
                f"{hypothesis_file} has {len(hyps)} lines but {reference_file} has {len(refs)}: "
                "give one hypothesis per reference line"
            )
        return self.score(hyps, refs)


class Tokenizer(abc.ABC):
    """Text <-> ids, with a vocabulary that has pad, bos, eos and unk."""

    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3
    # which side the core builds this tokenizer for, set before train(): "both" ([tokenizer] shared = true),
    # "source" or "target" (shared = false), for a tokenizer whose settings name a model per side
    side: str = "both"
    # symbols the task reserves (Task.reserved_symbols), set before train(): a tokenizer that learns its
    # vocabulary gives each one piece of its own, which encoding never splits
    reserved_symbols: tuple[str, ...] = ()

    @abc.abstractmethod
    def train(self, texts: Iterable[str], workdir: Path) -> None:
        """Build the vocabulary (and any model) from training text."""

    @abc.abstractmethod
    def save(self, directory: Path, prefix: str) -> None:
        """Write everything needed to load this tokenizer again under directory/prefix*."""

    @abc.abstractmethod
    def load(self, directory: Path, prefix: str) -> None:
        """Load what save() wrote."""

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Text to ids, without bos/eos."""

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """encode() of each text, the same ids: a tokenizer whose library encodes a list faster overrides it
        (preparing a large corpus calls it on shards of thousands of texts, one process per core)."""
        return [self.encode(text) for text in texts]

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text; special ids are dropped."""

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of ids."""

    @abc.abstractmethod
    def id_to_token(self, index: int) -> str:
        """The vocabulary entry of one id (decoders with constraints read it)."""

    def export(self, engine: str, directory: Path, side: str) -> bool:
        """Write this tokenizer's files for `engine` into directory, as the `side` ("source" or "target") of an
        exported model (`seqxduce export --to huggingface`: source.spm or target.spm); raise UserError naming what
        that engine's tokenizer cannot do as this one does. False (the default): no export to that engine."""
        return False

    def encode_sampled(self, texts: list[str], seed: int) -> list[list[int]] | None:
        """Texts to ids with a sampled segmentation (subword regularization), without bos/eos; None (the
        default) says that this tokenizer does not sample.

        The trainer asks for it once per epoch with the whole training split, in the same order each time, and
        a seed derived from ([train] seed, epoch): the same (texts, seed) must give the same ids in any process
        or thread, so that --resume and every data-parallel rank rebuild the same batches. Each result must
        decode() back to its text. Validation, test and decoding always use encode().
        """
        return None


class Model(abc.ABC):
    """An encoder-decoder: full forward for training, encode + step with an explicit cache for decoding.

    Implementations also derive from torch.nn.Module: the core moves them (`.to`), switches modes (`.train`,
    `.eval`, `.training`), optimizes `.parameters()` and saves and loads `state_dict()`. Shapes: src (B, S),
    tgt_in (B, T), with pad ids in the padding.
    """

    @property
    def schedule_width(self) -> int | None:
        """The width d_model in the paper's learning-rate schedule (`[train] schedule = "inverse_sqrt"`, eq. 3);
        None for a model without one, whose recipes then use `schedule = "constant"`."""
        return None

    @property
    def positions_limit(self) -> int | None:
        """The sequence length (tokens, source or output) the model was built for: where learned positions end,
        or the size its position table starts at; `serve` takes it as its default length limits. None: the model
        declares none."""
        return None

    @abc.abstractmethod
    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> ModelOutput:
        """Teacher-forced logits (B, T, V) for next-token prediction."""

    @abc.abstractmethod
    def encode(self, src: torch.Tensor) -> Any:
        """Run the encoder once; the result is opaque to the caller."""

    @abc.abstractmethod
    def init_cache(self, memory: Any) -> Any:
        """An empty incremental-decoding cache for the batch encoded in memory."""

    @abc.abstractmethod
    def step(self, tokens: torch.Tensor, memory: Any, cache: Any) -> tuple[torch.Tensor, Any]:
        """Feed the last tokens (B,) and return log-probabilities (B, V) for the next one and the new cache."""

    @abc.abstractmethod
    def reorder(self, memory: Any, cache: Any, index: torch.Tensor) -> tuple[Any, Any]:
        """Select batch rows (beam search keeps, duplicates and drops hypotheses)."""

    def annotate(self, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-position figures of decoded pairs (e.g. ACT ponder counts), for `seqxduce decode --annotations`.

        src (B, S) and tgt_in = bos + output tokens (B, T), padded; a name starting with `source_` maps to a
        (B, S) tensor, one starting with `target_` to (B, T), where target position j is the step that chose
        output token j (the last one chose eos). The default: a model with nothing to report.
        """
        return {}

    def forward_flops_per_token(self) -> tuple[int, int] | None:
        """FLOPs of one forward pass per source token and per target token (2 per multiply-add), for
        `seqxduce recipe info`; the default None counts 2 FLOPs per parameter and token."""
        return None

    def attention_weights(self, src: torch.Tensor, tgt_in: torch.Tensor) -> AttentionWeights | None:
        """Attention probabilities of a teacher-forced pass over src (B, S) and tgt_in (B, T), for
        `seqxduce attention`; target position j is the step that chose output token j, as in annotate().

        None (the default) says that this model does not expose its attention weights.
        """
        return None

    def export(self, request: ExportRequest) -> bool:
        """Write this model's weights for request.engine into request.directory, for `seqxduce export`; raise
        UserError naming a setting that engine cannot represent. False (the default): no export to that engine.
        """
        return False


@dataclass
class ImportedModel:
    """What an Importer read from another toolkit's model folder, for `seqxduce import` to make a run of.

    recipe: the recipe's sections as TOML would give them ({"task": {...}, "tokenizer": {...}, "model": {...},
    "decode": {...}}), describing the model exactly; tokenizers: where the recipe's tokenizer plugin loads each
    side from, {"src": (folder, prefix), "tgt": (folder, prefix)} (one entry, "src", with [tokenizer]
    shared = true), as Tokenizer.load(folder, prefix) reads it; weights: the state_dict of the model the recipe
    builds, every tensor of it (the core loads it strictly: a missing or extra name is refused).
    """

    recipe: dict[str, dict[str, Any]]
    tokenizers: dict[str, tuple[Path, str]]
    weights: dict[str, Any]  # name -> torch.Tensor
    notes: list[str] = field(default_factory=list)  # lines `seqxduce import` prints (what was mapped to what)


class Importer(abc.ABC):
    """Reads a model trained by another toolkit (`seqxduce import DIR --from NAME -o RUN`)."""

    @abc.abstractmethod
    def read(self, source: Path, workdir: Path) -> ImportedModel:
        """Read the model folder `source` (files it stages for the tokenizers go under `workdir`, a temporary
        folder); anything the recipe cannot represent is a UserError naming it, never an approximation."""


class StepConstraint(abc.ABC):
    """Restricts which tokens a search may choose at each step (e.g. only well-formed trees).

    The search calls start() once, then per step mask() before choosing and advance() after, so a
    constraint keeps incremental state per row instead of re-reading every prefix.
    """

    @abc.abstractmethod
    def start(self, request: DecodeRequest, rows: torch.Tensor) -> None:
        """Begin a search; rows (N,) gives the source index (into request.sources) of each search row."""

    @abc.abstractmethod
    def mask(self, logprobs: torch.Tensor) -> torch.Tensor:
        """Return logprobs (N, V) with forbidden tokens set to -inf for each current row."""

    @abc.abstractmethod
    def advance(self, origin: torch.Tensor, tokens: torch.Tensor) -> None:
        """The search kept rows: new row i continues old row origin[i] with token tokens[i]."""


@dataclass(frozen=True)
class Phrases:
    """One source's lexical constraints as target token ids: `include`, phrases every output must contain (in any
    order), and `exclude`, phrases no output may contain. A phrase is one or more tokens."""

    include: tuple[tuple[int, ...], ...] = ()
    exclude: tuple[tuple[int, ...], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)

    def tokens_needed(self) -> int:
        """The tokens the phrases that must appear take (at most: one phrase may overlap another)."""
        return sum(map(len, self.include))


@dataclass
class DecodeRequest:
    """A batch of sources to decode: token ids (B, S) plus the raw source text, for decoders with constraints."""

    src: torch.Tensor
    sources: list[str]
    bos_id: int
    eos_id: int
    pad_id: int
    # per source, target ids every output must start with (then searched freely), as CTranslate2's target_prefix;
    # None or [] = none. The core's searches force them; they belong to the output and count in its logprob, not
    # in its score (what follows the prefix ranks hypotheses, as Hugging Face's decoder_input_ids)
    prefixes: list[list[int]] | None = None
    # per source, phrases every output must contain and phrases none may (decoding/phrases.py); None or empty
    # Phrases = none. The core's searches honour them
    constraints: list[Phrases] | None = None


class Decoder(abc.ABC):
    """Turns a model and a batch of sources into n-best lists of hypotheses."""

    @abc.abstractmethod
    def decode(self, model: Model, request: DecodeRequest) -> list[list[Hypothesis]]:
        """Return, for each source, its hypotheses best first."""


# ---------------------------------------------------------------- factories: what a register(...) callback takes


class TaskFactory(Protocol):
    """Builds a task from its settings (an instance of the settings class registered with it, or None)."""

    def __call__(self, settings: Any) -> Task: ...


class TokenizerFactory(Protocol):
    """Builds an untrained tokenizer from its settings; the core then trains or loads it."""

    def __call__(self, settings: Any) -> Tokenizer: ...


class ModelFactory(Protocol):
    """Builds a model (a torch.nn.Module implementing Model) for the vocabularies; import torch inside it."""

    def __call__(self, settings: Any, vocab: VocabInfo) -> Model: ...


class DecoderFactory(Protocol):
    """Builds a decoder; it sees the target tokenizer for constraints over the vocabulary."""

    def __call__(self, settings: Any, tokenizer: Tokenizer) -> Decoder: ...


class ImporterFactory(Protocol):
    """Builds an importer (settings: an instance of the settings class registered with it, or None)."""

    def __call__(self, settings: Any) -> Importer: ...


def iter_lines(path: Path | str) -> Iterator[str]:
    """The lines of a UTF-8 text file ('-': stdin) one at a time, as read_lines gives them, for inputs of any
    length; a line that is not UTF-8 is refused naming its number."""
    import sys

    stream = sys.stdin.buffer if str(path) == "-" else _opened(Path(path))
    try:
        for number, raw in enumerate(stream, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"{path}:{number}: invalid UTF-8 ({err.reason}); convert the file to UTF-8") from None
            yield text.rstrip("\n").rstrip("\r")
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _opened(path: Path):
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    return path.open("rb")


def count_lines(path: Path | str) -> int:
    """How many lines iter_lines gives for a file (a last line without a newline counted), read in 1 MB chunks."""
    count, last = 0, b"\n"
    with _opened(Path(path)) as stream:
        while chunk := stream.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def read_lines(path: Path) -> list[str]:
    """Read a UTF-8 text file as lines without their newline, with a clear error naming a bad line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: invalid UTF-8 ({err.reason}); convert the file to UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]
