"""What a request may ask, checked before anything is queued: each mistake becomes a RequestError (a 4xx with a
JSON body naming the field), never an exception that reaches the model. No torch, no starlette here."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

MAX_NBEST = 32  # a bound on the work one request can ask for; a wider beam is refused the same way
MAX_BEAM = 64


class RequestError(Exception):
    """A client's mistake: the HTTP status and a one-line message naming the field."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass(frozen=True)
class Limits:
    """The server's bounds on one request and on what it keeps in memory."""

    max_request_bytes: int = 1_000_000
    max_inputs: int = 64
    max_source_tokens: int = 256
    max_queue: int = 1024  # sources waiting to be decoded, all requests together
    max_batch_tokens: int = 4096  # padded source tokens in one batch
    max_wait_ms: float = 5.0


@dataclass
@dataclass(frozen=True)
class Prefixed:
    """An input given as {"source": ..., "prefix": ...}: its output must start with the prefix (target text)."""

    text: str
    prefix: str


@dataclass
class DecodeAsk:
    """A checked /v1/decode request: the sources, the hypotheses wanted per source and the decode keys changed."""

    inputs: list[str | Prefixed]
    nbest: int
    changes: dict[str, Any] = field(default_factory=dict)


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; 400 when it is not UTF-8, not JSON or not an object."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(400, f"body: not UTF-8 (byte {err.start}); send JSON encoded as UTF-8") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise RequestError(400, f"body: not JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    if not isinstance(data, dict):
        raise RequestError(400, f"body: a JSON object is expected, not {_type_name(data)}")
    return data


def check_source(value: Any, where: str) -> str:
    """One source: a non-empty string on one line."""
    if not isinstance(value, str):
        raise RequestError(400, f"{where}: a string is expected, not {_type_name(value)}")
    if not value.strip():
        raise RequestError(422, f"{where}: empty; send a sentence")
    if "\n" in value or "\r" in value:
        raise RequestError(422, f"{where}: holds a line break; send one sentence per item")
    return value


def check_input(value: Any, where: str) -> str | Prefixed:
    """One input: a source string, or {"source": ..., "prefix": ...} to force the start of its output."""
    if not isinstance(value, dict):
        return check_source(value, where)
    unknown = sorted(set(value) - {"source", "prefix"})
    if unknown or "source" not in value:
        raise RequestError(400, f"{where}: an object takes \"source\" and \"prefix\" (target text the output "
                                f"starts with){'; not ' + repr(unknown[0]) if unknown else ''}")
    prefix = value.get("prefix", "")
    if not isinstance(prefix, str) or "\n" in prefix or "\r" in prefix:
        raise RequestError(400, f"{where}.prefix: one line of text is expected")
    return Prefixed(check_source(value["source"], f"{where}.source"), prefix)


def parse_decode(data: dict[str, Any], limits: Limits, decode_keys: dict[str, Any], default_nbest: int) -> DecodeAsk:
    """Check a /v1/decode body: inputs, nbest, and decode keys among decode_keys (name -> current value, whose
    type a new value must have); ranges are the settings' own, checked when the decoder is built."""
    if "inputs" not in data:
        raise RequestError(400, "inputs: missing; send {\"inputs\": [\"a sentence\", ...]}")
    inputs = data["inputs"]
    if not isinstance(inputs, list):
        raise RequestError(400, f"inputs: a list of strings is expected, not {_type_name(inputs)}")
    if not inputs:
        raise RequestError(422, "inputs: empty list; send at least one sentence")
    if len(inputs) > limits.max_inputs:
        raise RequestError(413, f"inputs: {len(inputs)} sentences, more than this server's --max-inputs "
                                f"{limits.max_inputs}; split the request")
    sources = [check_input(value, f"inputs[{i}]") for i, value in enumerate(inputs)]
    nbest = data.get("nbest", default_nbest)
    if not _is_int(nbest):
        raise RequestError(400, f"nbest: an integer is expected, not {_type_name(nbest)}")
    if not 1 <= nbest <= MAX_NBEST:
        raise RequestError(422, f"nbest: {nbest} is out of range; give 1..{MAX_NBEST}")
    changes = {}
    for key, value in data.items():
        if key in ("inputs", "nbest"):
            continue
        if key not in decode_keys:
            allowed = ", ".join(["inputs", "nbest", *sorted(decode_keys)])
            raise RequestError(400, f"{key}: not a key this server takes; the keys are: {allowed}")
        changes[key] = check_value(key, value, decode_keys[key])
    if changes.get("beam", 0) > MAX_BEAM:
        raise RequestError(422, f"beam: {changes['beam']} is out of range for this server; give at most {MAX_BEAM}")
    return DecodeAsk(sources, nbest, changes)


def check_value(key: str, value: Any, current: Any) -> Any:
    """A decode key's new value, of the type its current value has (an integer is a fine float)."""
    if isinstance(current, bool):
        ok = isinstance(value, bool)
    elif isinstance(current, int):
        ok = _is_int(value)
    elif isinstance(current, float):
        ok = _is_int(value) or isinstance(value, float)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, type(current))
    if not ok:
        raise RequestError(400, f"{key}: {_type_name(current)} expected, not {_type_name(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise RequestError(422, f"{key}: {value} is out of range; give a finite number")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)
