"""seqxduce: a plugin-based sequence transduction toolkit.

The functions below are what the CLI calls; importing this package does not import torch.
"""

from seqxduce.api import (
    AttentionWeights,
    Decoder,
    DecodeRequest,
    Example,
    Hypothesis,
    Model,
    ModelOutput,
    Postprocessed,
    Report,
    Settings,
    StepConstraint,
    Task,
    Tokenizer,
    TrainingStopped,
    UserError,
    VocabInfo,
    setting,
)
from seqxduce.engine import (
    RunStart,
    attention,
    average,
    decode,
    decode_file,
    decode_split,
    distill,
    evaluate,
    export_run,
    import_model,
    info,
    load_recipe,
    plot,
    prepare,
    recipe_cost,
    score,
    score_file,
    serve,
    train,
)
from seqxduce.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = [
    "AttentionWeights", "Decoder", "DecodeRequest", "Example", "Hypothesis", "Model", "ModelOutput", "Postprocessed",
    "Report", "Settings", "StepConstraint", "Task", "Tokenizer", "TrainingStopped", "UserError", "VocabInfo",
    "setting", "hookimpl",
    "train", "RunStart", "decode", "decode_split", "evaluate", "average", "load_recipe", "prepare",
    "info", "plot", "attention", "recipe_cost", "score", "export_run", "serve", "import_model", "decode_file",
    "score_file", "distill",
]
