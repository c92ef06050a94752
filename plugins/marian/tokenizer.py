"""Marian's tokenizer: a SentencePiece model cuts text into pieces, and the model's vocab.json numbers them.

A Marian model has two SentencePiece models (source.spm, target.spm) and one vocab.json over both, whose ids are
not SentencePiece's own: a piece missing from vocab.json is <unk>. In a run directory each side is one tokenizer
([tokenizer] shared = false) saved as PREFIX.spm and PREFIX.vocab.json. As Hugging Face's MarianTokenizer does, a
leading language tag `>>xx<<` is one token, eos (`</s>`) ends the source (the core
appends it), the decoder starts from <pad> (bos_id = pad_id: Marian has no bos; a model exported by `seqxduce
export --to huggingface` starts from its own <s>: [tokenizer] decoder_start), and ids become text as
MarianTokenizer.decode(ids, skip_special_tokens=True) makes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from seqxduce.api import Tokenizer, UserError

from .tokenizer_settings import EOS, PAD, UNK, MarianTokenizerSettings

SPACE = "\u2581"  # SentencePiece's word boundary, "▁"


def read_vocab(path: Path) -> list[str]:
    """vocab.json (piece -> id) as the pieces by id; ids must be 0..N-1, each once, and hold the three specials."""
    try:
        mapping = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not a readable vocab.json ({err}); give the model's vocab.json") from None
    if not isinstance(mapping, dict) or not all(isinstance(i, int) for i in mapping.values()):
        raise UserError(f"{path}: not a piece -> id mapping; give the model's vocab.json")
    pieces: list[str | None] = [None] * len(mapping)
    for piece, index in mapping.items():
        if not 0 <= index < len(mapping) or pieces[index] is not None:
            raise UserError(f"{path}: id {index} ({piece!r}) is out of 0..{len(mapping) - 1} or given twice; "
                            "the ids of vocab.json must number its pieces 0..N-1")
        pieces[index] = piece
    for special in (PAD, EOS, UNK):
        if special not in mapping:
            raise UserError(f"{path}: holds no {special}; a Marian vocabulary has <pad>, </s> and <unk>")
    return pieces  # type: ignore[return-value]


class MarianTokenizer(Tokenizer):
    """One side of a Marian model: its SentencePiece model and the shared vocab.json's numbering."""

    def __init__(self, settings: MarianTokenizerSettings | None = None) -> None:
        self.decoder_start = settings.decoder_start if settings is not None else PAD
        self.processor: spm.SentencePieceProcessor | None = None
        self.model_proto = b""
        self.pieces: list[str] = []
        self.ids: dict[str, int] = {}

    def train(self, texts: Iterable[str], workdir: Path) -> None:
        """A Marian tokenizer comes with its model: refused."""
        raise UserError("[tokenizer] name = \"marian\" is a pretrained model's tokenizer, not one to train: make a "
                        "run with `seqxduce import DIR --from marian -o RUN`, then fine-tune with `seqxduce train "
                        "RECIPE --init-from RUN`")

    def use(self, model_proto: bytes, pieces: list[str], where: str) -> None:
        """Take a SentencePiece model (its bytes) and the pieces by id; `where` names them in errors."""
        try:
            processor = spm.SentencePieceProcessor(model_proto=model_proto)
        except RuntimeError as err:
            raise UserError(f"{where}: not a SentencePiece model ({err})") from None
        self.processor, self.model_proto, self.pieces = processor, model_proto, list(pieces)
        self.ids = {piece: index for index, piece in enumerate(self.pieces)}
        self.pad_id, self.eos_id, self.unk_id = self.ids[PAD], self.ids[EOS], self.ids[UNK]
        if self.decoder_start not in self.ids:
            raise UserError(f"[tokenizer] decoder_start = {self.decoder_start!r}: {where}'s vocabulary has no such "
                            "piece; give the piece config.json's decoder_start_token_id numbers")
        self.bos_id = self.ids[self.decoder_start]  # Marian's decoder_start_token_id: <pad>, unless exported by us

    def save(self, directory: Path, prefix: str) -> None:
        """Write PREFIX.spm and PREFIX.vocab.json."""
        directory = Path(directory)
        (directory / f"{prefix}.spm").write_bytes(self._ready_proto())
        mapping = {piece: index for index, piece in enumerate(self.pieces)}
        (directory / f"{prefix}.vocab.json").write_text(json.dumps(mapping, ensure_ascii=False, indent=0),
                                                          encoding="utf-8")

    def load(self, directory: Path, prefix: str) -> None:
        """Read PREFIX.spm and PREFIX.vocab.json."""
        model = Path(directory) / f"{prefix}.spm"
        if not model.is_file():
            raise UserError(f"{model}: no such file; a Marian run holds it (`seqxduce import --from marian`)")
        self.use(model.read_bytes(), read_vocab(Path(directory) / f"{prefix}.vocab.json"), str(model))

    def _ready(self) -> spm.SentencePieceProcessor:
        if self.processor is None:
            raise UserError("the marian tokenizer has no model: load() it first")
        return self.processor

    def _ready_proto(self) -> bytes:
        self._ready()
        return self.model_proto

    def pieces_of(self, text: str) -> list[str]:
        """The pieces of a text: a leading language tag >>xx<< as one piece (<unk> where the vocabulary lacks it, as
        Hugging Face's tokenizer reads it), then SentencePiece's."""
        tag: list[str] = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            tag, text = [text[: end + 2]], text[end + 2:]
        return tag + self._ready().encode(text, out_type=str)

    def encode(self, text: str) -> list[int]:
        """Text to ids by vocab.json, without eos; a piece vocab.json lacks is <unk>."""
        return [self.ids.get(piece, self.unk_id) for piece in self.pieces_of(text)]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text as Hugging Face's MarianTokenizer.decode(ids, skip_special_tokens=True) gives them: pad, eos
        and unk dropped, the other pieces joined by the SentencePiece model, and every '▁' left then read as the
        space it stands for. SentencePiece keeps a piece it lacks as it is, '▁' and all: in the OPUS-MT layout
        vocab.json is the union of both sides, so a target may hold a piece only the source model has."""
        skip = {self.pad_id, self.bos_id, self.eos_id, self.unk_id}
        pieces = [self.pieces[int(index)] for index in ids if int(index) not in skip]
        return self._ready().decode_pieces(pieces).replace(SPACE, " ").strip()

    def export(self, engine: str, directory: Path, side: str) -> bool:
        """For `seqxduce export --to huggingface`: this side's SentencePiece model back as source.spm or
        target.spm (the model export writes vocab.json from our pieces by id, which are vocab.json's)."""
        if engine != "huggingface":
            return False
        (Path(directory) / f"{side}.spm").write_bytes(self._ready_proto())
        return True

    @property
    def vocab_size(self) -> int:
        """Number of ids: vocab.json's size."""
        return len(self.pieces)

    def id_to_token(self, index: int) -> str:
        """vocab.json's piece of an id."""
        return self.pieces[int(index)]
