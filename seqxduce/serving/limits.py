"""What a request may ask, checked before anything is queued: each mistake becomes a RequestError (a 4xx with a
JSON body naming the field), never an exception that reaches the model; what a request costs (its longest output
and its work: sources x beam x output length) is checked here too. No torch, no starlette here."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from seqxduce.settings_check import Settings, setting

MAX_NBEST = 32  # a bound on the work one request can ask for; a wider beam is refused the same way
SERVE_MAX_BEAM = 64  # a server's own cap on a request's beam (the search's MAX_BEAM bounds any decode)
MAX_INT_DIGITS = 30  # longer integer literals are not converted (Python refuses past 4,300 digits, slowly)
MAX_KEY_SHOWN = 40  # characters of a client's key or text repeated in an error message
# an input's "constraints": a bound on what one input may ask the search to track (each phrase is compared with
# every row's window at every step) and on the text tokenized for it before it is queued; the phrases that must
# appear are bounded again by the beam (at most one per beam entry) and, in tokens, by --max-output-tokens
MAX_PHRASES = 16
MAX_PHRASE_CHARS = 200


class RequestError(Exception):
    """A client's mistake: the HTTP status and a one-line message naming the field. close: the body may be
    unread, so the connection is closed after the answer (a 413 never reads the rest of a 300 MB upload)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, close: bool = False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.close = close


@dataclass(frozen=True)
class Limits(Settings):
    """The server's bounds on one request, on what it keeps in memory, on connections and on shutdown, each
    declared with its bounds and help as a setting, and each a `seqxduce serve` option of the same name
    (serving.command makes the options from these fields). Built once, checked when built."""

    max_batch_tokens: int = setting(4096, min=1, help="padded source tokens decoded together in one batch")
    max_wait_ms: float = setting(5.0, min=0.0, help="how long a batch waits for more sources after its first arrives")
    max_request_bytes: int = setting(1_000_000, min=1, help="largest request body accepted (413 beyond, and the "
                                                            "connection closed)")
    max_inputs: int = setting(64, min=1, help="most sentences in one request (413 beyond)")
    max_source_tokens: int | None = setting(None, min=1, help="longest source in tokens (413 beyond) [default: the "
                                                              "model's max_positions if declared, else 1024]")
    max_output_tokens: int | None = setting(
        None, min=1, help="longest output a request may ask for: min_len, max_len_b and max_len_a x source length + "
                          "max_len_b, a target prefix, and /v1/attention's target (422/413 beyond) [default: the "
                          "model's max_positions if declared, else 1024]")
    max_work: int = setting(200_000, min=1, help="most token steps one request may ask for: the sum over its sources "
                                                 "of beam (or samples) x longest output (413 beyond)")
    max_queue: int = setting(1024, min=1, help="most sources waiting, all requests together (503 with Retry-After "
                                               "beyond)")
    max_request_seconds: float = setting(60.0, min=0.0, min_exclusive=True,
                                         help="a request not answered this long after it arrived: 503 if still "
                                              "queued, 504 if being decoded (its batch stops once nobody of it "
                                              "waits)")
    busy_after_seconds: float = setting(10.0, min=0.0, help="GET /ready answers 503 while a new client's request "
                                                            "would wait longer: the running batch has run this "
                                                            "long, or a client not served yet has waited so")
    read_timeout_seconds: float = setting(20.0, min=0.0, min_exclusive=True,
                                          help="time a client has to send a request's headers (the connection is "
                                               "closed beyond), and again its body (408 beyond)")
    write_timeout_seconds: float = setting(20.0, min=0.0, min_exclusive=True,
                                           help="a client that takes nothing of its answer this long is cut, and "
                                                "the unsent answer dropped (one reading slowly but steadily is "
                                                "never cut, however long the answer takes)")
    max_unread_bytes: int = setting(256 << 20, min=1,
                                    help="answers written but not yet read by their clients, all connections "
                                         "together; beyond it the connection stalled the longest is cut")
    keep_alive_seconds: int = setting(5, min=1, help="an idle keep-alive connection is closed after this")
    max_connections: int = setting(256, min=1, help="most open connections; one more is answered 503 and closed")
    max_connections_per_client: int = setting(32, min=1, help="most open connections from one address; one more is "
                                                              "answered 429 and closed (a trusted proxy's, "
                                                              "--forwarded-allow-ips, are not counted)")
    admit_share: float = setting(0.5, min=0.0, min_exclusive=True,
                                 help="a request whose decode, estimated from the pace measured at start-up, takes "
                                      "more than this share of --max-request-seconds is refused (413): admitted, it "
                                      "would hold the worker to its deadline (above 1 admits requests estimated "
                                      "past it, which end in 504)")
    shutdown_grace_seconds: float = setting(10.0, min=0.0, help="after SIGTERM or Ctrl-C, the whole shutdown takes at "
                                                                "most this: clients still sending a request or "
                                                                "waiting for a batch are answered 503 and cut, and a "
                                                                "batch still running is not waited for")

    def served(self, positions: int | None) -> Limits:
        """These limits with the source and output lengths not given resolved: the length the model was built for
        (Model.positions_limit: past learned positions a sequence fails in the model), else 1024."""
        return dataclasses.replace(self, max_source_tokens=self.max_source_tokens or positions or 1024,
                                   max_output_tokens=self.max_output_tokens or positions or 1024)


@dataclass(frozen=True)
class Prefixed:
    """An input given as an object, {"source": ..., "prefix": ..., "constraints": [...]}: its output must start
    with the prefix (target text) and hold the phrases of its constraints ("!words": must not hold them)."""

    text: str
    prefix: str
    tgt_lang: str = ""  # the input's own language to write ("" : the request's tgt_lang, or none)
    # the phrases as sent, "!words" marked: decoding.phrases.PhraseText reads them (it imports torch, this
    # module does not), so they travel as text through the batcher, each with its own input
    constraints: tuple[str, ...] = ()


# a language a request names ("tgt_lang", "src_lang"): a code, never a text, so that a refusal repeats it whole
MAX_LANG_CHARS = 32


def source_text(source: str | Prefixed) -> str:
    """An input's source text, whether it came with a prefix or not."""
    return source.text if isinstance(source, Prefixed) else source


@dataclass
class DecodeAsk:
    """A checked /v1/decode request: the sources, the hypotheses wanted per source and the decode keys changed."""

    inputs: list[str | Prefixed]
    nbest: int
    changes: dict[str, Any] = field(default_factory=dict)
    # the language to write and the sources' (a multilingual run's; the task's Direction), "" for none
    tgt_lang: str = ""
    src_lang: str = ""


class LongInteger:
    """An integer literal of more than MAX_INT_DIGITS digits, kept unconverted: no setting takes one, and
    converting it costs time quadratic in its length (Python refuses past 4,300 digits)."""

    def __init__(self, digits: str):
        self.digits = len(digits.lstrip("-"))


def _integer(text: str) -> int | LongInteger:
    return int(text) if len(text) <= MAX_INT_DIGITS else LongInteger(text)


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; 400 when it is not UTF-8, not JSON, not an object, nested past what the parser
    takes, or holds a string that is not Unicode (a lone surrogate)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(400, f"body: not UTF-8 (byte {err.start}); send JSON encoded as UTF-8") from None
    try:
        data = json.loads(text, parse_int=_integer)
    except json.JSONDecodeError as err:
        raise RequestError(400, f"body: not JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except RecursionError:  # the parser recurses per level: 100,000 brackets reach Python's limit
        raise RequestError(400, "body: JSON nested too deep; a request is an object of strings, numbers and "
                                "one list") from None
    if not isinstance(data, dict):
        raise RequestError(400, f"body: a JSON object is expected, not {_type_name(data)}")
    _check_unicode(data)
    return data


def _check_unicode(data: dict[str, Any]) -> None:
    """400 naming the key whose name or string value holds a lone surrogate (JSON's \\ud800 escapes decode to
    one; it cannot be encoded back, so it would fail the tokenizer or the answer)."""
    for key, value in data.items():
        if not _is_unicode(key):
            raise RequestError(400, f"{shown(key)}: a key with a lone surrogate; send valid Unicode")
        values = value if isinstance(value, list) else [value]
        for i, item in enumerate(values):
            if isinstance(item, str) and not _is_unicode(item):
                where = f"{key}[{i}]" if isinstance(value, list) else key
                raise RequestError(400, f"{shown(where)}: holds a lone surrogate; send valid Unicode")


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(text: str) -> str:
    """A client's text as an error message may repeat it: escaped where not printable, cut after a few words."""
    escaped = text.encode("ascii", "backslashreplace").decode("ascii")
    return escaped if len(escaped) <= MAX_KEY_SHOWN else escaped[:MAX_KEY_SHOWN] + "..."


def check_source(value: Any, where: str) -> str:
    """One source: a non-empty string on one line (of valid Unicode: an input object's strings are not seen by
    parse_json's check)."""
    if not isinstance(value, str):
        raise RequestError(400, f"{where}: a string is expected, not {_type_name(value)}")
    if not _is_unicode(value):
        raise RequestError(400, f"{where}: holds a lone surrogate; send valid Unicode")
    if not value.strip():
        raise RequestError(422, f"{where}: empty; send a sentence")
    if "\n" in value or "\r" in value:
        raise RequestError(422, f"{where}: holds a line break; send one sentence per item")
    return value


INPUT_KEYS = ("source", "prefix", "tgt_lang", "constraints")


def check_input(value: Any, where: str) -> str | Prefixed:
    """One input: a source string, or {"source": ..., "prefix": ..., "tgt_lang": ..., "constraints": [...]} to
    force the start of its output, its language, or phrases it must (and must not) hold."""
    if not isinstance(value, dict):
        return check_source(value, where)
    unknown = sorted(set(value) - set(INPUT_KEYS))
    if unknown or "source" not in value:
        raise RequestError(400, f"{where}: an object takes \"source\", \"prefix\" (target text the output "
                                f"starts with), \"tgt_lang\" (its language) and \"constraints\" (phrases the "
                                f"output must hold, \"!words\" for those it must not)"
                                f"{'; not ' + repr(shown(unknown[0])) if unknown else ''}")
    prefix = value.get("prefix", "")
    if not isinstance(prefix, str) or "\n" in prefix or "\r" in prefix or not _is_unicode(prefix):
        raise RequestError(400, f"{where}.prefix: one line of text is expected")
    return Prefixed(check_source(value["source"], f"{where}.source"), prefix,
                    check_lang(value.get("tgt_lang", ""), f"{where}.tgt_lang"),
                    check_constraints(value.get("constraints", []), f"{where}.constraints"))


def check_constraints(value: Any, where: str) -> tuple[str, ...]:
    """An input's "constraints": a list of at most MAX_PHRASES phrases, each a string of at most MAX_PHRASE_CHARS
    characters on one line with words in it ("!words": words that must not appear; "\\!words": words that must,
    starting with "!"), as decoding.phrases.PhraseText.from_list reads them. Any other value is a 400 naming
    `where` (inputs[3].constraints), so that nothing malformed reaches the tokenizer or the search."""
    example = "send a list of phrases, such as [\"Mann\", \"!einem\"]"
    if not isinstance(value, list):
        raise RequestError(400, f"{where}: a list of strings is expected, not {_type_name(value)}; {example}")
    if len(value) > MAX_PHRASES:
        raise RequestError(400, f"{where}: {len(value)} phrases, more than the {MAX_PHRASES} an input may have; "
                                "send fewer")
    for i, phrase in enumerate(value):
        _check_phrase(phrase, f"{where}[{i}]")
    return tuple(value)


def _check_phrase(phrase: Any, where: str) -> None:
    """One phrase of an input's constraints (check_constraints)."""
    if not isinstance(phrase, str):
        raise RequestError(400, f"{where}: a string is expected, not {_type_name(phrase)}")
    if len(phrase) > MAX_PHRASE_CHARS:
        raise RequestError(400, f"{where}: {len(phrase)} characters, more than the {MAX_PHRASE_CHARS} a phrase may "
                                "have; shorten it")
    if any(c in phrase for c in "\n\r\t"):
        raise RequestError(400, f"{where}: holds a line break or tab; send one phrase per item")
    if not _is_unicode(phrase):
        raise RequestError(400, f"{where}: holds a lone surrogate; send valid Unicode")
    # as PhraseText.from_list reads it: a leading "!" marks a phrase that must not appear, "\\!" escapes it
    words = phrase[1:] if phrase.startswith("!") else phrase.removeprefix("\\")
    if not words.strip():
        raise RequestError(400, f"{where}: an empty phrase; send words (\"!words\" for words that must not "
                                "appear), or leave it out")


def check_lang(value: Any, where: str) -> str:
    """A language a request names: a short string on one line ("" for none)."""
    if not isinstance(value, str):
        raise RequestError(400, f"{where}: a string is expected, not {_type_name(value)}")
    if len(value) > MAX_LANG_CHARS or not value.isprintable():
        raise RequestError(422, f"{where}: {shown(value)!r} is no language code; give one such as \"de\"")
    return value.strip()


# a request's fields choosing the direction of a multilingual run (decoding/directions.py)
LANG_KEYS = ("tgt_lang", "src_lang")


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
    if isinstance(nbest, LongInteger):
        raise RequestError(422, f"nbest: an integer of {nbest.digits} digits is out of range; give 1..{MAX_NBEST}")
    if not _is_int(nbest):
        raise RequestError(400, f"nbest: an integer is expected, not {_type_name(nbest)}")
    if not 1 <= nbest <= MAX_NBEST:
        raise RequestError(422, f"nbest: {nbest} is out of range; give 1..{MAX_NBEST}")
    changes = {}
    for key, value in data.items():
        if key in ("inputs", "nbest", *LANG_KEYS):
            continue
        if key not in decode_keys:
            allowed = ", ".join(["inputs", "nbest", *LANG_KEYS, *sorted(decode_keys)])
            raise RequestError(400, f"{shown(key)}: not a key this server takes; the keys are: {allowed}")
        changes[key] = check_value(key, value, decode_keys[key])
    if changes.get("beam", 0) > SERVE_MAX_BEAM:
        raise RequestError(422, f"beam: {changes['beam']} is out of range for this server; give at most "
                                f"{SERVE_MAX_BEAM}")
    tgt_lang, src_lang = (check_lang(data.get(key, ""), key) for key in LANG_KEYS)
    return DecodeAsk(sources, nbest, changes, tgt_lang, src_lang)


def check_value(key: str, value: Any, current: Any) -> Any:
    """A decode key's new value, of the type its current value has (an integer is a fine float)."""
    if isinstance(value, LongInteger) and isinstance(current, (int, float)) and not isinstance(current, bool):
        raise RequestError(422, f"{key}: an integer of {value.digits} digits is out of range")
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


@dataclass(frozen=True)
class Lengths:
    """The settings that decide how much work a request is: output length limits and hypotheses per source."""

    max_len_a: float
    max_len_b: int
    min_len: int
    rows: int  # hypotheses searched per source: the beam, or the samples drawn
    rows_key: str  # which key gives rows ("beam", "nbest"), for messages


@dataclass(frozen=True)
class Cost:
    """What a checked request asks: its work (sum over sources of rows x longest output), each source's longest
    output in steps, and the rows searched per source (what its decode time is estimated from: serving.pace)."""

    work: int
    longest: list[int]
    rows: int


def check_cost(lengths: Lengths, tokens: list[int], changes: dict[str, Any], limits: Limits,
               prefixes: list[int] | None = None, phrases: list[int] | None = None) -> Cost:
    """The request's cost (its work: sum over sources of rows x longest output), or a 422/413 naming the field and the
    server's limit when one output may be longer than --max-output-tokens or the work passes --max-work.
    tokens: each source's length as the model reads it (eos included); prefixes: each source's target prefix in
    tokens (0 for none), which the search never cuts; phrases: the tokens of each source's phrases that must
    appear (0 for none), which the search leaves room for (search._room): its output's limit is at least the two
    together, so they count as a longer output does."""
    cap = limits.max_output_tokens
    flag = f"this server's --max-output-tokens {cap}"
    if lengths.min_len > cap:
        raise RequestError(422, f"min_len: {lengths.min_len} forces outputs longer than {flag}; give at most {cap}")
    if lengths.max_len_b > cap:
        raise RequestError(422, f"max_len_b: {lengths.max_len_b} allows outputs longer than {flag}; give at most "
                                f"{cap}")
    work, steps = 0, []
    for i, n in enumerate(tokens):
        forced = (prefixes[i] if prefixes else 0) + (phrases[i] if phrases else 0)
        if forced > cap:
            raise RequestError(422, f"{_forced_field(i, prefixes, phrases)}: {forced} tokens the output must hold, "
                                    f"more than {flag}; shorten it")
        # as the search counts: the source without eos, and never less than a forced prefix
        longest = max(lengths.max_len_a * (n - 1) + lengths.max_len_b, forced)
        if longest > cap:
            where = "max_len_a" if "max_len_a" in changes else f"inputs[{i}]"
            given = [k for k in ("max_len_a", "max_len_b") if k in changes]
            origin = "as sent" if len(given) == 2 else "the recipe's" if not given else f"{given[0]} as sent"
            # max_len_a > 0 here: max_len_b alone within the cap was checked above, and a prefix past it
            room = math.floor((cap - lengths.max_len_b) / lengths.max_len_a)
            raise RequestError(422, f"{where}: outputs may reach {longest:.0f} tokens (max_len_a "
                                    f"{lengths.max_len_a:g} x {n - 1} source tokens + max_len_b "
                                    f"{lengths.max_len_b}, {origin}), more than {flag}, so these settings take "
                                    f"sources of at most {room} tokens; send a lower max_len_a or max_len_b, "
                                    "shorten the source, or start the server with a larger --max-output-tokens "
                                    "(up to the model's max_positions)")
        steps.append(max(1, math.floor(longest)))
        work += lengths.rows * steps[-1]
    if work > limits.max_work:
        # phrases that must appear lengthen the outputs they are in: fewer of them is a way out too
        less = ["fewer sources", f"a smaller {lengths.rows_key}", "shorter outputs",
                *(["fewer phrases that must appear"] if phrases and any(phrases) else [])]
        raise RequestError(413, f"inputs: {len(tokens)} sources x {lengths.rows_key} {lengths.rows} x their "
                                f"longest outputs make {work} token steps, more than this server's --max-work "
                                f"{limits.max_work}; send {', '.join(less[:-1])} or {less[-1]}")
    return Cost(work, steps, lengths.rows)


def _forced_field(i: int, prefixes: list[int] | None, phrases: list[int] | None) -> str:
    """The field that makes input i's output at least so long: its prefix, its constraints, or both."""
    named = [key for key, given in (("prefix", prefixes), ("constraints", phrases)) if given and given[i]]
    return f"inputs[{i}]." + " and .".join(named)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    if isinstance(value, LongInteger):
        return f"an integer of {value.digits} digits"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)
