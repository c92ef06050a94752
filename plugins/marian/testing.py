"""A tiny Marian model folder in the Hugging Face format, for tests, the parity benchmark and the docs test.

No model can be downloaded there, so one is made: two SentencePiece models trained on a few hundred generated
sentences, a vocab.json over their pieces numbered as Marian's are (</s> 0, <unk> 1, ..., <pad> last), and a
MarianMTModel with random weights (and a random final_logits_bias, so that its import is seen to matter) saved
with save_pretrained. A random model repeats one token to the length limit for every source; a few steps
of training (the target: the source's words in reverse order) make its outputs depend on the source and end at
varied lengths, as a real model's do. A multilingual one (`languages`) has a `>>xx<<` token per target
language in its vocab.json, as OPUS-MT's multilingual models have, and learns a word order per language
(language_target). Needs transformers (the `test` extra).
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Sequence
from pathlib import Path

WORDS = ("the a one cat dog bird sat ran sees eats on under near mat house tree big small red green old new "
         "quickly slowly and but").split()


def sentences(count: int, seed: int = 0, longest: int = 9) -> list[str]:
    """`count` generated sentences of 2..longest words."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, longest))) for _ in range(count)]


def target_prefixes(sources: list[str], seed: int = 1) -> list[str]:
    """A target prefix per source, for the prefix tests and the parity benchmark: a third none, a third the word
    the tiny model's output starts with (it reverses the words), a third one or two words that are not in the
    source at all, which the model finds unlikely."""
    rng = random.Random(seed)
    prefixes = []
    for i, source in enumerate(sources):
        words = source.split()
        absent = [w for w in WORDS if w not in words]
        prefixes.append(["", words[-1], " ".join(rng.sample(absent, rng.randint(1, 2)))][i % 3])
    return prefixes


def language_target(source: str, index: int) -> str:
    """The tiny multilingual model's target for its `index`-th language: the source's words turned by `index`
    places, then reversed (the 0th language's is the one-language model's, the words reversed)."""
    words = source.split()
    turn = index % len(words) if words else 0
    return " ".join(reversed(words[turn:] + words[:turn]))


def build_tiny_marian(folder: Path, seed: int = 0, d_model: int = 32, layers: int = 2, heads: int = 4,
                      d_ff: int = 64, activation: str = "swish", shared: bool = True, bias_scale: float = 0.5,
                      train_steps: int = 150, text: list[str] | None = None, pieces: int = 40,
                      languages: Sequence[str] = (), **config: object) -> Path:
    """Write a random MarianMTModel with its tokenizer files into `folder` (created); returns it. text: the
    sentences its SentencePiece models (of `pieces` pieces) and its few training steps see (default generated);
    languages: target language codes, each a `>>xx<<` token after <unk> (none: a one-pair model)."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = list(text) if text else sentences(400, seed)
    for side in ("source", "target"):
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=model, vocab_size=pieces,
                                       model_type="unigram" if side == "source" else "bpe", minloglevel=2,
                                       num_threads=1, hard_vocab_limit=False)
        (folder / f"{side}.spm").write_bytes(model.getvalue())
    pieces = ["</s>", "<unk>", *(f">>{lang}<<" for lang in languages)]
    for side in ("source", "target"):
        processor = spm.SentencePieceProcessor(model_proto=(folder / f"{side}.spm").read_bytes())
        pieces += [p for p in (processor.id_to_piece(i) for i in range(3, processor.get_piece_size()))
                   if p not in pieces]
    pieces.append("<pad>")
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}), encoding="utf-8")
    size = len(pieces)
    settings = dict(vocab_size=size, decoder_vocab_size=size, d_model=d_model, encoder_layers=layers,
                    decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
                    encoder_ffn_dim=d_ff, decoder_ffn_dim=d_ff, max_position_embeddings=256, pad_token_id=size - 1,
                    eos_token_id=0, decoder_start_token_id=size - 1, forced_eos_token_id=0, scale_embedding=True,
                    activation_function=activation, share_encoder_decoder_embeddings=shared)
    settings.update(config)
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**settings))
    if train_steps:
        _train(model, folder, text, train_steps, seed, languages)
    with torch.no_grad():
        # a random bias on top, so that an import that dropped final_logits_bias would be seen
        model.final_logits_bias.normal_(0.0, bias_scale)
        # OPUS-MT models have a zero <pad> row (Marian has no pad; Hugging Face's converter appends a zero row),
        # the decoder's start: CTranslate2's converter relies on it (start_from_zero_embedding)
        model.get_input_embeddings().weight[size - 1].zero_()
        if not shared:
            model.get_decoder().embed_tokens.weight[size - 1].zero_()
    # an OPUS-MT model's generation defaults: beam 4, <pad> banned, a length limit
    model.generation_config.update(num_beams=4, max_length=64, bad_words_ids=[[size - 1]])
    model.save_pretrained(folder)
    return folder


def _train(model, folder: Path, text: list[str], steps: int, seed: int, languages: Sequence[str] = ()) -> None:
    """A few Adam steps of Hugging Face's own training forward on reversing the word order (with languages, each
    source once per language, its tag written first, and that language's order: language_target)."""
    import torch
    from transformers import MarianTokenizer

    tokenizer = MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"))
    pairs = [(s, language_target(s, 0)) for s in text] if not languages else [
        (f">>{lang}<< {s}", language_target(s, index)) for s in text for index, lang in enumerate(languages)]
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = random.Random(seed)
    model.train()
    for _ in range(steps):
        batch = rng.sample(pairs, min(32, len(pairs)))
        inputs = tokenizer([s for s, _ in batch], text_target=[t for _, t in batch], padding=True,
                           return_tensors="pt")
        inputs["labels"][inputs["labels"] == model.config.pad_token_id] = -100
        loss = model(**inputs).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def hf_generate(folder: Path, source_ids: list[list[int]], beam: int, max_new_tokens: int,
                length_penalty: float = 1.0, batch_size: int = 32, forced_eos: int | None = 0,
                prefixes: list[list[int]] | None = None, renormalize: bool = False,
                early_stopping: bool | str = "never") -> list[tuple[list[int], float, float | None]]:
    """Hugging Face generate()'s best output per source: hf_generate_nbest's first."""
    return [hyps[0] for hyps in hf_generate_nbest(folder, source_ids, beam, max_new_tokens, 1, length_penalty,
                                                  batch_size, forced_eos, prefixes, renormalize, early_stopping)]


def hf_generate_nbest(folder: Path, source_ids: list[list[int]], beam: int, max_new_tokens: int, nbest: int,
                      length_penalty: float = 1.0, batch_size: int = 32, forced_eos: int | None = 0,
                      prefixes: list[list[int]] | None = None, renormalize: bool = False,
                      early_stopping: bool | str = "never") -> list[list[tuple[list[int], float, float | None]]]:
    """Hugging Face generate()'s `nbest` best outputs per source (num_return_sequences), best first, each as ids
    without the start token and eos (a target prefix included), its log-probability (eos and prefix included)
    from a teacher-forced pass, and with beam > 1 generate's own score of it (sequences_scores); source_ids end
    in eos. A prefix is given as generate takes one, decoder_input_ids = [<pad>] + prefix, and counts in the
    limit of max_new_tokens tokens after the start (eos included), as an imported max_length does.
    early_stopping: generate's stopping rule, by default "never", the exact search seqxduce's beam search runs by
    default; <pad> is banned as seqxduce's searches ban it; renormalize: generate's renormalize_logits."""
    import torch
    from transformers import MarianMTModel

    model = MarianMTModel.from_pretrained(folder).eval()
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    prefixes = prefixes or [[] for _ in source_ids]
    by_length: dict[int, list[int]] = {}  # generate takes one prompt length per batch
    for i, prefix in enumerate(prefixes):
        by_length.setdefault(len(prefix), []).append(i)
    out: list[list[tuple[list[int], float, float | None]]] = [[] for _ in source_ids]
    for rows in by_length.values():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            width = max(len(source_ids[i]) for i in chunk)
            ids = torch.tensor([source_ids[i] + [pad] * (width - len(source_ids[i])) for i in chunk])
            mask = (ids != pad).long()
            with torch.no_grad():
                generated = model.generate(
                    input_ids=ids, attention_mask=mask, decoder_input_ids=torch.tensor([[pad] + prefixes[i]
                                                                                        for i in chunk]),
                    num_beams=beam, do_sample=False, max_length=max_new_tokens + 1, length_penalty=length_penalty,
                    early_stopping=early_stopping if beam > 1 else False, bad_words_ids=[[pad]], min_length=0,
                    num_return_sequences=nbest, forced_eos_token_id=forced_eos, return_dict_in_generate=True,
                    output_scores=beam > 1, renormalize_logits=renormalize)
            scores = generated.sequences_scores.tolist() if beam > 1 else [None] * len(chunk) * nbest
            for at, sequence in enumerate(generated.sequences.tolist()):  # a source's nbest rows, best first
                row = at // nbest
                tokens = sequence[1:]
                tokens = tokens[: tokens.index(eos)] if eos in tokens else [t for t in tokens if t != pad]
                out[chunk[row]].append((tokens, _logprob(model, ids[row:row + 1], mask[row:row + 1], tokens, pad,
                                                         eos), scores[at]))
    return out


def _logprob(model, ids, mask, tokens: list[int], pad: int, eos: int) -> float:
    """log P(tokens + eos | source) under the Hugging Face model, teacher-forced."""
    import torch

    decoder_in = torch.tensor([[pad] + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_in).logits[0]
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    return float(logprobs.gather(1, torch.tensor(tokens + [eos]).unsqueeze(1)).sum())


def train_tiny_seqxduce_run(folder: Path, steps: int = 80, d_model: int = 32, layers: int = 1,
                            extra: Sequence[str] = ()) -> Path:
    """A seqxduce run in `folder`/run trained `steps` steps on the same reversing task (translation, files
    dataset, a SentencePiece tokenizer trained here, the paper's interleaved sinusoids, beam 4 decoding): for the
    tests and benchmark of `seqxduce export --to huggingface`. extra: `--set` overrides."""
    from click.testing import CliRunner

    from seqxduce.cli import add_plugin_commands

    folder = Path(folder)
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    for split, count, seed in (("train", 400, 0), ("valid", 20, 1), ("test", 20, 2)):
        text = sentences(count, seed)
        (data / f"{split}.en").write_text("\n".join(text) + "\n", encoding="utf-8")
        (data / f"{split}.de").write_text("\n".join(language_target(s, 0) for s in text) + "\n", encoding="utf-8")
    recipe = folder / "recipe.toml"
    recipe.write_text(f"""[task]
name = "translation"
data_dir = "{data}"
[tokenizer]
name = "sentencepiece"
vocab_size = 60
[model]
name = "transformer"
layers = {layers}
d_model = {d_model}
d_ff = {2 * d_model}
heads = 4
dropout = 0.0
[train]
device = "cpu"
max_steps = {steps}
max_tokens = 2000
schedule = "constant"
lr = 0.003
validate_every = {steps}
valid_decode_examples = 20
[decode]
name = "beam"
beam = 4
max_len_a = 0
max_len_b = 20
""", encoding="utf-8")
    run = folder / "run"
    args = ["train", str(recipe), "--out", str(run)]
    for override in extra:
        args += ["--set", override]
    result = CliRunner().invoke(add_plugin_commands(), args)
    if result.exit_code != 0:
        raise RuntimeError(f"training the tiny run failed:\n{result.output}")
    return run
