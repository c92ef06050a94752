"""The core's own recipe settings: [train], and the keys the core reads in [task], [tokenizer] and [decode]."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import setting


@dataclass
class TaskCore:
    name: str = setting(help="task plugin name (see `seqxduce plugins`)")
    data_dir: str = setting("data", help="where the task's data lives or is downloaded to (relative to the recipe)")


@dataclass
class TokenizerCore:
    name: str = setting(help="tokenizer plugin name")
    shared: bool = setting(True, help="one vocabulary for source and target (enables shared embeddings)")


@dataclass
class ModelCore:
    name: str = setting(help="model plugin name")
    preset: str = setting("", help="a named set of defaults the model plugin offers (e.g. base, big)")


@dataclass
class DecodeCore:
    name: str = setting("beam", help="decoder plugin name")
    batch_size: int = setting(64, help="sentences decoded together (sorted by length to waste little padding)")


@dataclass
class TrainSettings:
    seed: int = setting(1, help="seed for parameters, dropout and batch order")
    device: str = setting("auto", help="cpu, cuda, cuda:N, or auto (cuda when available)")
    precision: str = setting("fp32", help="fp32, bf16 (autocast) or fp16 (autocast + loss scaling)",
                             choices=("fp32", "bf16", "fp16"))
    max_tokens: int = setting(4096, help="source+target tokens per batch per process, before padding")
    update_freq: int = setting(1, help="batches accumulated per optimizer step (gradient accumulation)")
    max_steps: int = setting(1000, help="optimizer steps to train for")
    max_epochs: int = setting(0, help="stop after this many epochs as well (0 = no limit)")
    optimizer: str = setting("adam", help="adam (the paper's) or adamw", choices=("adam", "adamw"))
    betas: list[float] = setting([0.9, 0.98], help="Adam beta1, beta2 (paper: 0.9, 0.98)")
    eps: float = setting(1e-9, help="Adam epsilon (paper: 1e-9)")
    weight_decay: float = setting(0.0, help="weight decay (0 in the paper)")
    schedule: str = setting("inverse_sqrt", help="inverse_sqrt (paper, eq. 3) or constant",
                            choices=("inverse_sqrt", "constant"))
    warmup_steps: int = setting(4000, help="linear warm-up steps of the inverse_sqrt schedule (paper: 4000)")
    lr_scale: float = setting(1.0, help="factor on the paper's d_model^-0.5 * min(step^-0.5, step*warmup^-1.5)")
    lr: float = setting(5e-4, help="learning rate of the constant schedule")
    clip_norm: float = setting(0.0, help="clip the gradient norm to this (0 = off)")
    label_smoothing: float = setting(0.1, help="label smoothing epsilon (paper: 0.1)")
    max_source_len: int = setting(1024, help="training pairs with a longer source (in tokens) are skipped")
    max_target_len: int = setting(1024, help="training pairs with a longer target (in tokens) are skipped")
    log_every: int = setting(50, help="steps between progress lines in the metrics log")
    validate_every: int = setting(500, help="steps between validations (loss, ppl, task metric); 0 = only at end")
    valid_decode_examples: int = setting(200, help="valid examples greedily decoded for the task metric")
    checkpoint_every: int = setting(500, help="steps between checkpoints (one is always written at the end)")
    keep_checkpoints: int = setting(5, help="step checkpoints kept on disk (the oldest are removed)")
    average_last: int = setting(0, help="at the end, average the last N checkpoints into average.pt (0 = off)")
