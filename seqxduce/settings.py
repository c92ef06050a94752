"""The core's own recipe settings: [train], and the keys the core reads in [task], [tokenizer] and [decode]."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import Settings, UserError, setting


@dataclass
class TaskCore(Settings):
    name: str = setting(help="task plugin name (see `seqxduce plugins`)")
    data_dir: str = setting("data", help="where the task's data lives or is downloaded to (relative to the recipe)")


@dataclass
class TokenizerCore(Settings):
    name: str = setting(help="tokenizer plugin name")
    shared: bool = setting(True, help="one vocabulary for source and target (enables shared embeddings)")


@dataclass
class ModelCore(Settings):
    name: str = setting(help="model plugin name")
    preset: str = setting("", help="a named set of defaults the model plugin offers (e.g. base, big)")


@dataclass
class DecodeCore(Settings):
    name: str = setting("beam", help="decoder plugin name")
    batch_size: int = setting(64, help="sentences decoded together (sorted by length to waste little padding)",
                              min=1)
    batch_tokens: int = setting(0, help="when > 0, batches are capped by padded source tokens (sentences x longest "
                                        "source) instead of batch_size, as fairseq's --max-tokens; 0 = by batch_size",
                                min=0)
    quantize: str = setting("none", help="int8 = decode with every nn.Linear dynamically quantized to int8 "
                                         "(CPU only; faster, outputs may differ slightly); none = as trained",
                            choices=("none", "int8"), read_when={"precision": ("recipe",)},
                            instead='precision = "int8" quantizes, whatever quantize says')
    precision: str = setting("recipe", help="what decoding computes in: fp32, bf16 (autocast), fp16 (autocast, "
                                            "CUDA only), int8 (dynamically quantized Linear layers, CPU only), or "
                                            "recipe = int8 with quantize = \"int8\", else [train] precision",
                             choices=("recipe", "fp32", "bf16", "fp16", "int8"))
    compile: bool = setting(False, help="torch.compile the model's decoding step (the first batches pay the "
                                        "compilation; off by default: measure with bench/decode_speed.py)")
    # fairseq's --print-alignment reads the last layer; Garg et al. 2019 (fairseq's alignment models) found the
    # penultimate layer's encoder-decoder attention the best aligner, hence -2
    alignment_layer: int = setting(-2, help="decode --alignments: the encoder-decoder attention layer (or depth "
                                            "step) the alignments are read from, 1-based, negative from the end "
                                            "(-2 = the penultimate; a model with fewer layers: its first)")
    alignment_heads: int = setting(0, help="decode --alignments: average the first N heads of that layer "
                                           "(0 = all heads)", min=0)

    def validate(self) -> None:
        """Rules that bounds cannot express."""
        if self.alignment_layer == 0:
            raise UserError("[decode] alignment_layer = 0: layers count from 1 (or from the end with -1, -2, ...)")


@dataclass
class TrainSettings(Settings):
    seed: int = setting(1, help="seed for parameters, dropout and batch order")
    device: str = setting("auto", help="cpu, cuda, cuda:N, or auto (cuda when available)")
    precision: str = setting("fp32", help="fp32, bf16 (autocast) or fp16 (autocast + loss scaling)",
                             choices=("fp32", "bf16", "fp16"))
    max_tokens: int = setting(4096, help="source+target tokens per batch per process, padding included: "
                                         "rows x (longest source + longest target) stays within it", min=1)
    bucket_width: int = setting(0, help="batching by length: 0 sorts pairs by (source, target) length; N > 0 "
                                        "groups sources in buckets N tokens wide and sorts by target within "
                                        "each, for less target padding in large batches (Multi30k, 16k tokens: "
                                        "12.9% -> 8.4% padding at N = 4)", min=0)
    # Arivazhagan et al. 2019: T = 1 draws in proportion to size, T = 5 is their best balance for many languages,
    # a large T (inf) draws uniformly; fairseq's --sampling-temperature
    sampling_temperature: float = setting(1.0, help="a task with several training corpora: batches are drawn "
                                                    "from corpus i with probability proportional to weight_i * "
                                                    "n_i^(1/T), n_i its pairs (1 = in proportion to size, inf = "
                                                    "the weights alone); its tokenizer is trained on the same "
                                                    "balance", min=0.0, min_exclusive=True)
    update_freq: int = setting(1, help="batches accumulated per optimizer step (gradient accumulation)", min=1)
    # 0 steps is allowed: a run that only builds, saves and validates the initial model
    max_steps: int = setting(1000, help="optimizer steps to train for", min=0)
    max_epochs: int = setting(0, help="stop after this many epochs as well (0 = no limit)", min=0)
    optimizer: str = setting("adam", help="adam (the paper's) or adamw", choices=("adam", "adamw"))
    # torch's Adam rejects betas outside [0, 1); checking here fails before the data is prepared
    betas: list[float] = setting([0.9, 0.98], help="Adam beta1, beta2 (paper: 0.9, 0.98)", min=0.0, max=1.0,
                                 max_exclusive=True)
    eps: float = setting(1e-9, help="Adam epsilon (paper: 1e-9)", min=0.0)
    weight_decay: float = setting(0.0, help="weight decay (0 in the paper)", min=0.0)
    schedule: str = setting("inverse_sqrt", help="the learning-rate schedule: inverse_sqrt (paper, eq. 3), "
                                                 "constant (lr), or cosine / linear: linear warm-up to lr over "
                                                 "warmup_steps, then a cosine or linear decay to lr_floor at "
                                                 "max_steps (common for fine-tuning)",
                            choices=("inverse_sqrt", "constant", "cosine", "linear"))
    # eq. 3 divides by warmup^1.5, so 0 has no meaning
    warmup_steps: int = setting(4000, help="linear warm-up steps of the inverse_sqrt, cosine and linear schedules "
                                           "(paper: 4000)", min=1, ignored_when={"schedule": ("constant",)},
                               instead='the constant schedule starts at lr; schedule = "cosine" or "linear" '
                                       'warms up to it')
    lr_scale: float = setting(1.0, help="factor on the paper's d_model^-0.5 * min(step^-0.5, step*warmup^-1.5)",
                              min=0.0, min_exclusive=True, read_when={"schedule": ("inverse_sqrt",)},
                              instead="the other schedules' rate is lr")
    lr: float = setting(5e-4, help="learning rate of the constant schedule; the peak (after warm-up) of the cosine "
                                   "and linear ones", min=0.0, min_exclusive=True,
                     ignored_when={"schedule": ("inverse_sqrt",)},
                     instead='the paper\'s schedule takes its rate from d_model and warmup_steps: scale it with '
                             'lr_scale, or choose schedule = "constant", "cosine" or "linear" to set lr')
    lr_floor: float = setting(0.0, help="the learning rate the cosine and linear schedules decay to at max_steps",
                              min=0.0, read_when={"schedule": ("cosine", "linear")},
                              instead='schedule = "cosine" or "linear" decays to it')
    clip_norm: float = setting(0.0, help="clip the gradient norm to this (0 = off)", min=0.0)
    # fp16 loss scaling overflows now and then (the scale then halves); a run that diverged does so every step
    max_nonfinite_steps: int = setting(10, help="updates with a non-finite loss or gradient are skipped (counted "
                                       "in metrics.jsonl as skipped_updates); after this many in a row the run "
                                       "stops at the next log or checkpoint step (the check reads the device)",
                                       min=1)
    # at 1 the target is uniform and the gold token carries no signal
    label_smoothing: float = setting(0.1, help="label smoothing epsilon (paper: 0.1)", min=0.0, max=1.0,
                                     max_exclusive=True)
    max_source_len: int = setting(1024, help="training pairs with a longer source (in tokens) are skipped", min=1)
    max_target_len: int = setting(1024, help="training pairs with a longer target (in tokens) are skipped", min=1)
    curriculum_start_len: int = setting(0, help="length curriculum: at step 0 train only on pairs whose source "
                                                "has at most this many tokens (eos included); 0 = off", min=0)
    curriculum_steps: int = setting(0, help="steps over which the curriculum's source cap grows linearly to "
                                            "the longest training source", min=0,
                                   ignored_when={"curriculum_start_len": (0,)},
                                   instead="set curriculum_start_len to start a length curriculum")
    curriculum_hold_steps: int = setting(0, help="steps the curriculum's source cap stays at curriculum_start_len "
                                                 "before it starts to grow (a two-stage curriculum: short "
                                                 "sources alone until they are learned); 0 = grow from step 0",
                                         min=0, ignored_when={"curriculum_start_len": (0,)},
                                         instead="set curriculum_start_len (and curriculum_steps) to start a "
                                                 "length curriculum")
    log_every: int = setting(50, help="steps between progress lines in the metrics log", min=1)
    validate_every: int = setting(500, help="steps between validations (loss, ppl, task metric); 0 = only at end",
                                  min=0)
    valid_decode_examples: int = setting(200, help="valid examples decoded for the task metric (of each group, "
                                                   "for a task that scores its valid split in groups: a "
                                                   "multilingual translation's directions)", min=0)
    valid_search: str = setting("recipe", help="how validation decodes for the task metric: recipe = with the "
                                               "recipe's [decode] decoder, as `seqxduce decode` does; greedy = "
                                               "greedy search (faster when the recipe's beam is wide)",
                                choices=("recipe", "greedy"), ignored_when={"valid_decode_examples": (0,)},
                                instead="set valid_decode_examples > 0 to decode a validation sample")
    patience: int = setting(0, help="early stopping: stop after this many validations in a row without a better "
                                    "validation metric (the task's metric on the decoded sample, higher or lower "
                                    "better as the task says; the valid loss when valid_decode_examples = 0); "
                                    "0 = train to max_steps. best.pt always holds the best validation so far",
                            min=0)
    # a core key of groups, not languages: the translation task's groups are its directions (docs/multilingual.md)
    best_group: str = setting("", help="a task that scores its valid split in groups (a multilingual "
                                       "translation's directions, e.g. en-de): early stopping and best.pt follow "
                                       "the task's metric on this group alone; empty = on the whole split (the mean "
                                       "of its groups)", ignored_when={"valid_decode_examples": (0,)},
                              instead="set valid_decode_examples > 0: groups are scored on the decoded sample")
    checkpoint_every: int = setting(500, help="steps between checkpoints (one is always written at the end)", min=1)
    keep_checkpoints: int = setting(5, help="step checkpoints kept on disk (the oldest are removed)", min=1)
    collective_timeout: float = setting(600.0, help="with several processes: seconds one waits for the others in "
                                        "a collective operation before it stops with an error (one died or hangs)",
                                        min=0.0, min_exclusive=True)
    average_last: int = setting(0, help="at the end, average the last N checkpoints into average.pt (0 = off)",
                                min=0)
    token_cache: bool = setting(True, help="train from the prepared training data (`seqxduce prepare`: the "
                                           "tokenizer and the binarized ids on disk, keyed by the data, the "
                                           "tokenizer and the limits, memory-mapped by every run and rank); the "
                                           "folder is $SEQXDUCE_CACHE, else ~/.cache/seqxduce; false: every "
                                           "process encodes the split in memory")
    fsdp: bool = setting(False, help="with several processes (torchrun): shard parameters, gradients and Adam's "
                                     "state over them (FSDP2 fully_shard of the whole model: gradients and Adam's "
                                     "state stay sharded, parameters are gathered for forward and backward) "
                                     "instead of a full copy of each on every process, for models whose training "
                                     "state does not fit one device; "
                                     "checkpoints hold the full weights, validation runs on a gathered copy on "
                                     "rank 0")
    compile: str = setting("auto", help="torch.compile the model for training: on, off, or auto (on for CUDA, off "
                                        "for the CPU, where compiling costs more than it saves on small runs); "
                                        "validation, decoding and checkpoints use the uncompiled model",
                           choices=("auto", "on", "off"))
    members: int = setting(1, help="train this many models of the recipe, the k-th with seed + k - 1 and the same "
                                   "tokenizer files, into the run directory (the first) and <run>/members/<k>; "
                                   "decoding the run averages their predictions (an ensemble of independent runs); "
                                   "each validates itself alone during training", min=1)
    parallel_members: int = setting(0, help="members trained at the same time, each in its own process, the CPU "
                                            "threads split between them; 0 = one per CPU core (at most members) "
                                            "on the CPU, one at a time on CUDA", min=0)
    tensorboard: bool = setting(False, help="also write TensorBoard event files to <run>/tensorboard "
                                            "(needs the [tensorboard] extra: pip install -e '.[tensorboard]')")

    def validate(self) -> None:
        """Rules that bounds cannot express."""
        if len(self.betas) != 2:
            raise UserError(f"[train] betas = {self.betas!r}: give two numbers, beta1 and beta2, e.g. [0.9, 0.98]")
        if self.curriculum_start_len and not self.curriculum_steps:
            raise UserError(f"[train] curriculum_start_len = {self.curriculum_start_len} needs curriculum_steps > 0 "
                            "(the steps over which long sources join); set it, or curriculum_start_len = 0")
        if self.schedule in ("cosine", "linear") and self.lr_floor >= self.lr:
            raise UserError(f"[train] lr_floor = {self.lr_floor:g} must be below lr = {self.lr:g}, the peak the "
                            f"{self.schedule} schedule decays from; lower lr_floor or raise lr")
        if self.patience and not self.validate_every:
            raise UserError(f"[train] patience = {self.patience} counts validations, but validate_every = 0 "
                            "validates only at the end; set validate_every > 0, or patience = 0")


@dataclass
class DistillSettings(Settings):
    """[distill]: a student trained on its teacher's outputs (sequence-level knowledge distillation, Kim & Rush
    2016), made by `seqxduce distill TEACHER_RUN RECIPE --out RUN`."""

    teacher: str = setting("", help="the recipe the teacher run must have been trained with, relative to this "
                                     "recipe ([task], [tokenizer] and [model] compared); empty: any teacher run")
    targets: str = setting("", help="the distilled dataset the student trains on (a folder `seqxduce distill` "
                                    "writes and sets here); empty: the task's own training targets")
    original_ratio: float = setting(0.0, help="the share of the original training pairs trained on beside the "
                                              "distilled ones (0: the distilled pairs alone; 1: every original "
                                              "pair too), a seeded choice", min=0.0, max=1.0)
    member_outputs: bool = setting(False, help="the teacher's members also decode the training sources each alone, "
                                               "and the student trains on each member's outputs beside the "
                                               "ensemble's (Nguyen et al. 2020, data diversification): one "
                                               "distilled set per member, kept and keyed as the ensemble's; needs "
                                               "a teacher of several members")
    member_targets: list[str] = setting([], help="the members' distilled sets the student trains on beside "
                                                 "targets (`seqxduce distill` sets them with member_outputs)",
                                        ignored_when={"member_outputs": (False,)},
                                        instead="set member_outputs = true first")
    word_kd: float = setting(0.0, help="word-level knowledge distillation (Kim & Rush 2016; Freitag et al. 2017): "
                                       "the weight of the teacher's next-token distribution in the loss, the rest "
                                       "the label-smoothed references' (0: off). The teacher's top word_kd_top_k "
                                       "probabilities at every target position of the training split are computed "
                                       "once and kept in the cache, keyed by the teacher's checkpoints and the "
                                       "student's encoded pairs; needs the teacher's tokenizer files",
                             min=0.0, max=1.0)
    word_kd_top_k: int = setting(8, help="how many of the teacher's most probable next tokens are kept per target "
                                         "position (renormalised to sum to 1): k x 4 bytes per target token",
                                 min=1, max=256, ignored_when={"word_kd": (0, 0.0)}, instead="set word_kd > 0 first")
    teacher_run: str = setting("", help="the teacher run whose distributions word_kd learns from (`seqxduce "
                                        "distill` sets it to its TEACHER_RUN)", ignored_when={"word_kd": (0, 0.0)},
                               instead="set word_kd > 0 first")
    teacher_checkpoint: str = setting("", help="which of teacher_run's checkpoints give the distributions: best, "
                                               "average, last or a file (`seqxduce distill --checkpoint` sets it); "
                                               "empty: the one decode loads", ignored_when={"word_kd": (0, 0.0)},
                                      instead="set word_kd > 0 first")
