"""A SentencePiece tokenizer: one trained here has the ids pad 0, bos 1, eos 2, unk 3; a given model_file keeps its own
(any ids, as long as all four pieces exist and pad, bos and eos differ)."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import sentencepiece as spm

from seqxduce.api import Tokenizer, UserError

from .pieces import user_defined_pieces
from .settings import SentencePieceSettings

SPECIALS = {"pad": (0, "<pad>"), "bos": (1, "<s>"), "eos": (2, "</s>"), "unk": (3, "<unk>")}

# sentencepiece's sampling seed is one global of the library: setting it and encoding must not interleave with
# another thread's sampling (the trainer encodes the next epoch in its prefetch thread)
_SAMPLING = threading.Lock()
# the library reads the seed as a 32-bit unsigned int whose largest value means "no seed" (random)
_SEEDS = 2**32 - 1


def _nonempty(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        if text.strip():
            yield text


class SentencePieceTokenizer(Tokenizer):
    """BPE or unigram subwords trained with the sentencepiece library; the model is kept in memory."""

    def __init__(self, settings: SentencePieceSettings):
        self.settings = settings
        self.processor: spm.SentencePieceProcessor | None = None
        self.model_proto: bytes = b""
        self.tags: dict[str, int] = {}  # the model's user-defined pieces (reserved symbols) and their ids

    def train(self, texts: Iterable[str], workdir: Path) -> None:
        """Train on texts (one sentence each), or take [tokenizer] model_file / target_model_file for this side;
        nothing is written until save()."""
        s = self.settings
        given = s.target_model_file if self.side == "target" and s.target_model_file else s.model_file
        if given:
            self._take(Path(given), "target_model_file" if given == s.target_model_file else "model_file")
            self._check_reserved("target_model_file" if given == s.target_model_file else "model_file", given)
            return
        model = io.BytesIO()
        spm.set_random_generator_seed(s.seed)
        options = {f"{name}_id": index for name, (index, _) in SPECIALS.items()}
        options.update({f"{name}_piece": piece for name, (_, piece) in SPECIALS.items()})
        if self.reserved_symbols:  # one piece each, matched before any other segmentation (never split)
            options["user_defined_symbols"] = list(self.reserved_symbols)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=_nonempty(texts),
                model_writer=model,
                model_type=s.model_type,
                vocab_size=s.vocab_size,
                character_coverage=s.character_coverage,
                input_sentence_size=s.input_sentence_size,
                shuffle_input_sentence=True,
                max_sentence_length=s.max_sentence_length,
                normalization_rule_name=s.normalization_rule_name,
                byte_fallback=s.byte_fallback,
                split_digits=s.split_digits,
                num_threads=s.num_threads,
                minloglevel=2,  # sentencepiece logs every step to stderr otherwise
                **options,
            )
        except RuntimeError as err:
            raise UserError(f"[tokenizer] sentencepiece training failed: {err}; lower "
                            "[tokenizer] vocab_size if it is too high for the corpus") from None
        self._use(model.getvalue())

    def _check_reserved(self, key: str, given: str) -> None:
        """A given model must hold the task's reserved symbols as pieces of their own."""
        missing = [symbol for symbol in self.reserved_symbols if symbol not in self.tags]
        if missing:
            raise UserError(f"[tokenizer] {key} = {given!r} has no user-defined piece {missing[0]!r}, which the task "
                            f"writes ({len(missing)} of {len(self.reserved_symbols)} missing): train the model with "
                            "--user_defined_symbols, or let seqxduce train one")

    def _take(self, path: Path, key: str) -> None:
        """An existing model as this side's: its size must be [tokenizer] vocab_size, its specials defined."""
        if not path.is_file():
            raise UserError(f"[tokenizer] {key} = {str(path)!r}: no such file; name a SentencePiece .model file")
        try:
            self._use(path.read_bytes(), own=True)
        except RuntimeError as err:
            raise UserError(f"[tokenizer] {key} = {str(path)!r}: not a SentencePiece model ({err})") from None
        size = self._ready().get_piece_size()
        if size != self.settings.vocab_size:
            raise UserError(f"[tokenizer] {key} = {str(path)!r} has {size} pieces but vocab_size = "
                            f"{self.settings.vocab_size}: set vocab_size = {size} (the model's size)")

    def _use(self, proto: bytes, own: bool = False) -> None:
        """Take a model; one trained here has the fixed special ids, one given (model_file) its own, which must
        all be defined and pad, bos and eos distinct."""
        processor = spm.SentencePieceProcessor(model_proto=proto)
        ids = {name: getattr(processor, f"{name}_id")() for name in SPECIALS}
        if own or ids != {name: index for name, (index, _) in SPECIALS.items()}:
            missing = [name for name, index in ids.items() if index < 0]
            if missing:
                raise UserError(f"the sentencepiece model has no {missing[0]} piece ({missing[0]}_id = -1); seqxduce "
                                f"needs pad, bos, eos and unk: train it with --{missing[0]}_id set, or let seqxduce "
                                "train one")
            if len({ids["pad"], ids["bos"], ids["eos"]}) != 3:
                raise UserError(f"the sentencepiece model gives pad, bos and eos the ids {ids['pad']}, {ids['bos']}, "
                                f"{ids['eos']}: they must differ")
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = ids["pad"], ids["bos"], ids["eos"], ids["unk"]
        self.processor, self.model_proto = processor, proto
        self.tags = user_defined_pieces(proto)
        # longest first: a tag that starts another (<2zh>, <2zh_Hant>) does not cut it
        self._tag_pattern = re.compile("(" + "|".join(re.escape(t) for t in sorted(self.tags, key=len, reverse=True))
                                       + ")") if self.tags else re.compile("(?!)")

    def _ready(self) -> spm.SentencePieceProcessor:
        if self.processor is None:
            raise UserError("the sentencepiece tokenizer has no model: train() or load() it first")
        return self.processor

    def save(self, directory: Path, prefix: str) -> None:
        """Write <prefix>.model (all decoding needs) and <prefix>.vocab (piece and score per line)."""
        processor = self._ready()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{prefix}.model").write_bytes(self.model_proto)
        vocab = "".join(f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n"
                        for i in range(processor.get_piece_size()))
        (directory / f"{prefix}.vocab").write_text(vocab, encoding="utf-8")

    def load(self, directory: Path, prefix: str) -> None:
        """Load <prefix>.model written by save()."""
        path = Path(directory) / f"{prefix}.model"
        if not path.is_file():
            raise UserError(f"{path}: no such file; it is written when the tokenizer is trained")
        self._use(path.read_bytes())

    def _split(self, texts: list[str]) -> tuple[list[str], list[list[int | str]]]:
        """Texts cut around every reserved symbol (a language tag): the pieces of text between them, for one call
        into the library, and per text its layout (a tag's id, or a piece's place in that list as a str). The
        library is then never given a tag to segment, so that no sampling can split one; a leading tag is the
        text's first id, not the library's '▁' before it."""
        pieces: list[str] = []
        layouts: list[list[int | str]] = []
        for text in texts:
            layout: list[int | str] = []
            for part in self._tag_pattern.split(text):
                if part in self.tags:
                    layout.append(self.tags[part])
                elif part.strip() or not layout:
                    layout.append(str(len(pieces)))
                    pieces.append(part.lstrip(" ") if layout[:-1] else part)
            layouts.append(layout)
        return pieces, layouts

    def _encoded(self, texts: list[str], encode) -> list[list[int]]:
        """encode(list of texts) -> ids, with the reserved symbols as their own ids (see _split)."""
        if not self.tags:
            return encode(list(texts))
        pieces, layouts = self._split(list(texts))
        ids = encode(pieces)
        return [[i for item in layout for i in ([item] if isinstance(item, int) else ids[int(item)])]
                for layout in layouts]

    def encode(self, text: str) -> list[int]:
        """Text to subword ids, without bos/eos."""
        return self._encoded([text], lambda texts: self._ready().encode(texts, out_type=int))[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """encode() of each text in one call into the library (one thread: preparing runs a process per core)."""
        return self._encoded(texts, lambda pieces: self._ready().encode(pieces, out_type=int, num_threads=1))

    def encode_sampled(self, texts: list[str], seed: int) -> list[list[int]] | None:
        """Texts to subword ids with a sampled segmentation (BPE-dropout, or unigram sampling), without bos/eos;
        None when [tokenizer] sample_alpha = 0."""
        s = self.settings
        if s.sample_alpha <= 0:
            return None
        processor = self._ready()
        # one thread: the samples then depend only on the seed and the list (measured with sentencepiece 0.2:
        # a unigram batch split over several threads samples differently, and each sentence's sample depends
        # on its place in the list, as one random stream runs through it)
        with _SAMPLING:
            spm.set_random_generator_seed(seed % _SEEDS)
            return self._encoded(texts, lambda pieces: processor.encode(
                pieces, out_type=int, enable_sampling=True, alpha=s.sample_alpha, nbest_size=s.sample_nbest,
                num_threads=1))

    def decode(self, ids: Sequence[int]) -> str:
        """Subword ids to text; pad/bos/eos are dropped (unknown pieces read as ' ⁇ ')."""
        specials = {self.pad_id, self.bos_id, self.eos_id}
        return self._ready().decode([int(i) for i in ids if int(i) not in specials])

    def export(self, engine: str, directory: Path, side: str) -> bool:
        """For `seqxduce export --to huggingface`: the model as Marian's source.spm or target.spm (Hugging Face's
        MarianTokenizer cuts text with it and numbers the pieces by the vocab.json the model export writes, our
        ids). Its tokenizer keeps only a leading `>>xx<<` as one token and lets the library cut every other
        reserved symbol, which gives other pieces than ours (a '▁' before it): such tags are refused."""
        if engine != "huggingface":
            return False
        odd = sorted(tag for tag in self.tags if not (tag.startswith(">>") and tag.endswith("<<")))
        if odd:
            raise UserError(f"export --to huggingface: the {side} SentencePiece model has the user-defined pieces "
                            f"{', '.join(odd[:4])}{' ...' if len(odd) > 4 else ''} (the task's language tags), "
                            "which Hugging Face's MarianTokenizer does not keep whole: only a leading >>xx<< tag; "
                            "train with [task] lang_tag_format = \">>{lang}<<\" to export")
        (Path(directory) / f"{side}.spm").write_bytes(self.model_proto)
        return True

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return self._ready().get_piece_size()

    def id_to_token(self, index: int) -> str:
        """The piece of an id (word-initial pieces start with '▁')."""
        return self._ready().id_to_piece(int(index))
