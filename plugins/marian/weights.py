"""Reading a Hugging Face model's weights without unpickling anything a model folder may hold.

model.safetensors (or the shards model.safetensors.index.json names) is read here directly: an 8-byte header
length, a JSON header of name -> dtype, shape and byte range, then the raw little-endian tensors. Only when a
folder has nothing but pytorch_model.bin is a pickle read, through torch.load(weights_only=True), which refuses
any object other than tensors and plain values.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch

from seqxduce.api import UserError

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of one .safetensors file, as CPU tensors of their stored dtype."""
    data = Path(path).read_bytes()
    if len(data) < 8:
        raise UserError(f"{path}: not a safetensors file (too short)")
    size = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UserError(f"{path}: not a safetensors file (its header is not JSON)") from None
    body = memoryview(data)[8 + size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise UserError(f"{path}: tensor {name} has dtype {entry.get('dtype')!r}, which a model's weights do not "
                            "have; give the model's own weights file")
        begin, end = entry["data_offsets"]
        shape = list(entry["shape"])
        if not 0 <= begin <= end <= len(body):
            raise UserError(f"{path}: tensor {name} lies past the end of the file: truncated? download it again")
        raw = body[begin:end]
        tensor = torch.frombuffer(bytearray(raw), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        if tensor.numel() != _count(shape):
            raise UserError(f"{path}: tensor {name} holds {tensor.numel()} values for shape {shape}: damaged")
        tensors[name] = tensor.reshape(shape)
    return tensors


def _count(shape: list[int]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def read_weights(folder: Path) -> tuple[dict[str, torch.Tensor], str]:
    """(name -> tensor, the file read) of a Hugging Face model folder: safetensors where present."""
    folder = Path(folder)
    single = folder / "model.safetensors"
    if single.is_file():
        return read_safetensors(single), single.name
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, KeyError, TypeError, json.JSONDecodeError):
            raise UserError(f"{index}: no weight_map; give the index the shards came with") from None
        tensors: dict[str, torch.Tensor] = {}
        for shard in shards:
            tensors.update(read_safetensors(folder / shard))
        return tensors, index.name
    pickled = folder / "pytorch_model.bin"
    if pickled.is_file():
        try:
            state = torch.load(pickled, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise UserError(f"{pickled}: holds objects other than tensors, which are not loaded because unpickling "
                            "them could run code; convert it to model.safetensors") from None
        except Exception as err:  # torch raises several types for a damaged archive
            raise UserError(f"{pickled}: cannot be read ({type(err).__name__}); download it again") from None
        if not isinstance(state, dict):
            raise UserError(f"{pickled}: not a state dict")
        return dict(state), pickled.name
    raise UserError(f"{folder}: holds no model.safetensors (or its shards) and no pytorch_model.bin; give the "
                    "folder the model was saved to (save_pretrained)")
