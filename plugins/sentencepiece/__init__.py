"""seqxduce SentencePiece tokenizer plugin: BPE or unigram subwords with pad 0, bos 1, eos 2, unk 3.

Importing this module does not import sentencepiece; the factory does.
"""

from seqxduce import hookimpl
from seqxduce.api import Tokenizer

from .settings import SentencePieceSettings


def build_sentencepiece(settings: SentencePieceSettings) -> Tokenizer:
    """Tokenizer factory: an untrained SentencePiece tokenizer for one recipe's [tokenizer] settings."""
    from .tokenizer import SentencePieceTokenizer

    return SentencePieceTokenizer(settings)


@hookimpl
def register_tokenizers(register):
    register("sentencepiece", build_sentencepiece, settings=SentencePieceSettings,
             help="SentencePiece BPE/unigram subwords (trained on the task's training text)")
