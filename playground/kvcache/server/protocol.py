"""The KV-cache server's wire format: pure encode/decode, no sockets (docs/protocols.md).

A message is ZeroMQ multipart: frame 0 is a UTF-8 JSON object (the header, control data),
frame 1, when present, is raw float32 data, little-endian, C order: KV rows (num_tokens, width),
or for `attend` queries and outputs (num_seqs, heads, head_dim). Control and bulk data are kept
apart and pickle never touches the wire, so any ZeroMQ client in any language can speak it. A ROUTER server sees the client's identity
frame first; a REQ client's empty delimiter frame is accepted and echoed.

Request header: {"op": ..., "id": <anything, echoed>, ...op fields}.
Reply header:   {"ok": true, "id": ..., "server": <instance>, ...results} or
                {"ok": false, "id": ..., "server": <instance>, "error": <code>, "message": <one line>}.
A malformed request's error reply carries its `id` whenever one can be read (a top-level "id" of
frame 0, even when the header is refused for another reason), so a client with several requests
in flight can tell which one was refused. `server` is the instance id of the server process (new
at every start): a client sees a restart in the first reply that carries another one.
"""

import json
import re
from dataclasses import dataclass

import numpy as np

from playground.core.errors import PlaygroundError
from playground.kvcache.engine.kv_pool import KV_DTYPE

OPS = ("ping", "create", "append", "fork", "read", "free", "stats", "attend", "generate")

# error codes: the names a client can switch on
BAD_FRAME = "bad_frame"  # not 1-2 frames, header not a JSON object, no "op"
BAD_REQUEST = "bad_request"  # a field missing or of the wrong type/range; a header nested too deep
UNKNOWN_OP = "unknown_op"
UNKNOWN_SEQUENCE = "unknown_sequence"
BAD_KV_SHAPE = "bad_kv_shape"  # KV frame missing or not num_tokens x width float32
BAD_QUERY_SHAPE = "bad_query_shape"  # attend's query frame missing or not num_seqs x heads x head_dim float32
OUT_OF_MEMORY = "out_of_memory"  # refused, nothing changed; may fit later (see fits_when_empty)
NO_MODEL = "no_model"  # generate on a server that serves no model
LEASE_EXPIRED = "lease_expired"  # a generate dropped because its client was silent longer than the lease
INTERNAL_ERROR = "internal_error"  # the server raised while handling it (a bug); it goes on serving
ERROR_CODES = (
    BAD_FRAME,
    BAD_REQUEST,
    UNKNOWN_OP,
    UNKNOWN_SEQUENCE,
    BAD_KV_SHAPE,
    BAD_QUERY_SHAPE,
    OUT_OF_MEMORY,
    NO_MODEL,
    LEASE_EXPIRED,
    INTERNAL_ERROR,
)


SCAN_ID_BYTES = 65536  # how far into a header too deep to decode its top-level "id" is looked for


class ProtocolError(PlaygroundError):
    """A request the server refuses; becomes an error reply, the server goes on. `req_id` is the
    request's id when it could be read (echoed in the reply); `extra` are extra reply fields."""

    def __init__(self, code: str, message: str, req_id=None, **extra):
        self.code, self.req_id, self.extra = code, req_id, extra
        super().__init__(message)


@dataclass
class WireRequest:
    """A decoded request message: its JSON header and its data frame, if any."""

    header: dict
    kv_bytes: bytes | memoryview | None

    @property
    def op(self) -> str:
        return self.header["op"]


def encode_request(op: str, kv: np.ndarray | None = None, **fields) -> list[bytes]:
    frames = [json.dumps({"op": op, **fields}, separators=(",", ":")).encode()]
    if kv is not None:
        frames.append(np.ascontiguousarray(kv, dtype=KV_DTYPE).tobytes())
    return frames


def decode_request(frames: list) -> WireRequest:
    """The request in `frames` (the frames after the envelope); ProtocolError, with the request's
    id when frame 0 has one, for anything else."""
    header = decode_header(frames[0]) if frames else None
    req_id = header.get("id") if isinstance(header, dict) else None
    if not 1 <= len(frames) <= 2:
        raise ProtocolError(
            BAD_FRAME, f"expected 1 or 2 frames (header, optional KV), got {len(frames)}", req_id
        )
    if not isinstance(header, dict):
        raise ProtocolError(BAD_FRAME, f"frame 0 must be a JSON object, got {type(header).__name__}")
    if not isinstance(header.get("op"), str):
        raise ProtocolError(BAD_FRAME, 'header has no "op" string', req_id)
    if header["op"] not in OPS:
        raise ProtocolError(UNKNOWN_OP, f"unknown op {header['op']!r}; allowed: {', '.join(OPS)}", req_id)
    return WireRequest(header, frames[1] if len(frames) == 2 else None)


def decode_header(frame) -> object:
    """Frame 0 decoded from UTF-8 JSON (any JSON value: the caller checks it is an object).
    BAD_FRAME if it is not JSON; BAD_REQUEST if it nests deeper than the decoder recurses (about
    1,000 levels), with the top-level "id" found by a scan of its first SCAN_ID_BYTES."""
    try:
        text = bytes(frame).decode()
    except UnicodeDecodeError as e:
        raise ProtocolError(BAD_FRAME, f"frame 0 is not UTF-8 JSON: {e}") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise ProtocolError(BAD_FRAME, f"frame 0 is not a JSON object: {e}", scan_id(text)) from None
    except RecursionError:
        raise ProtocolError(
            BAD_REQUEST, "frame 0 nests arrays or objects too deep to decode", scan_id(text)
        ) from None


_TOKEN = re.compile(r'["{}\[\]]')
_COLON = re.compile(r"\s*:\s*")


def scan_id(text: str):
    """The value of the top-level "id" of a JSON object that could not be decoded whole (too deep,
    or broken after the id), or None: a scan that tracks strings and depth, reading the value with
    the JSON decoder. Only the first SCAN_ID_BYTES are looked at, so a huge frame costs little."""
    text = text[:SCAN_ID_BYTES]
    if not text.lstrip().startswith("{"):
        return None
    decoder, depth, pos = json.JSONDecoder(), 0, 0
    while (m := _TOKEN.search(text, pos)) is not None:
        c, pos = m.group(), m.end()
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        else:
            try:
                key, pos = json.decoder.scanstring(text, pos)  # type: ignore[attr-defined]  # public, unstubbed
            except ValueError:
                return None
            colon = _COLON.match(text, pos)
            if depth == 1 and key == "id" and colon:
                try:
                    value, _ = decoder.raw_decode(text, colon.end())
                except (ValueError, RecursionError):
                    return None
                return value if isinstance(value, str | int | float | bool) else None
    return None


def encode_reply(header: dict, kv: np.ndarray | None = None) -> list[bytes]:
    frames = [json.dumps(header, separators=(",", ":")).encode()]
    if kv is not None:
        frames.append(np.ascontiguousarray(kv, dtype=KV_DTYPE).tobytes())
    return frames


def request_id(frames: list):
    """The id of the request in `frames`, or None, whatever else is wrong with it."""
    try:
        header = decode_header(frames[0]) if frames else None
    except ProtocolError as e:
        return e.req_id
    return header.get("id") if isinstance(header, dict) else None


def decode_reply(frames: list, width: int | None = None) -> tuple[dict, np.ndarray | None]:
    """(header, KV array or None); the array is (num_tokens, width) when width is known."""
    header = json.loads(bytes(frames[0]))
    kv = None
    if len(frames) > 1:
        kv = np.frombuffer(frames[1], dtype=KV_DTYPE)
        if width:
            kv = kv.reshape(-1, width)
    return header, kv


# -- field checks: each names the field and what is allowed -----------------------------------
def get_optional_int(header: dict, name: str, minimum: int = 0) -> int | None:
    return get_int(header, name, minimum) if name in header else None


def get_int(header: dict, name: str, minimum: int = 0) -> int:
    value = header.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ProtocolError(
            BAD_REQUEST,
            f"{header['op']}: field {name!r} must be an integer >= {minimum}, "
            f"got {'nothing' if name not in header else repr(value)}",
        )
    return value


def get_number(header: dict, name: str, minimum: float, default: float) -> float:
    value = header.get(name, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not minimum <= value < float("inf"):
        raise ProtocolError(
            BAD_REQUEST, f"{header['op']}: field {name!r} must be a number >= {minimum:g}, got {value!r}"
        )
    return float(value)


def get_bool(header: dict, name: str, default: bool) -> bool:
    value = header.get(name, default)
    if not isinstance(value, bool):
        raise ProtocolError(
            BAD_REQUEST, f"{header['op']}: field {name!r} must be true or false, got {value!r}"
        )
    return value


def get_prompt(header: dict, vocab_size: int) -> list[int]:
    """generate's `prompt`: a string (its UTF-8 bytes are the tokens) or a list of token ids."""
    value = header.get("prompt")
    if isinstance(value, str):
        tokens = list(value.encode())
    elif isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in value
    ):
        tokens = value
    else:
        raise ProtocolError(
            BAD_REQUEST,
            f"{header['op']}: field 'prompt' must be a string or a list of token ids in [0, {vocab_size}), "
            f"got {str(value)[:80]}",
        )
    if not tokens:
        raise ProtocolError(BAD_REQUEST, f"{header['op']}: field 'prompt' is empty")
    return tokens


def get_int_list(header: dict, name: str, minimum: int = 0) -> list[int]:
    value = header.get(name)
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    ):
        raise ProtocolError(
            BAD_REQUEST,
            f"{header['op']}: field {name!r} must be a list of integers >= {minimum}, got {str(value)[:80]}",
        )
    return value


def kv_array(req: WireRequest, num_tokens: int, width: int) -> np.ndarray:
    """The request's KV frame as a (num_tokens, width) float32 view; BAD_KV_SHAPE otherwise."""
    return _float_frame(req, (num_tokens, width), BAD_KV_SHAPE, "KV", f"tokens at width {width}")


def query_array(req: WireRequest, num_seqs: int, heads: int, head_dim: int) -> np.ndarray:
    """attend's query frame as a (num_seqs, heads, head_dim) float32 view; BAD_QUERY_SHAPE otherwise."""
    return _float_frame(
        req, (num_seqs, heads, head_dim), BAD_QUERY_SHAPE, "query", f"queries of {heads} x {head_dim}"
    )


def _float_frame(req: WireRequest, shape: tuple[int, ...], code: str, what: str, unit: str) -> np.ndarray:
    count = int(np.prod(shape))
    expect = count * KV_DTYPE.itemsize
    dims = " x ".join(map(str, shape))
    if req.kv_bytes is None:
        if count == 0:
            return np.empty(shape, KV_DTYPE)
        raise ProtocolError(code, f"{req.op}: {what} frame missing; expected {dims} float32 = {expect} bytes")
    size = memoryview(req.kv_bytes).nbytes
    if size != expect:
        per = expect // max(shape[0], 1) if shape[0] else int(np.prod(shape[1:])) * KV_DTYPE.itemsize
        found = f"{size / per:g} {unit}" if size % 4 == 0 else "not whole float32s"
        raise ProtocolError(
            code,
            f"{req.op}: {what} frame has {size} bytes ({found}); expected {dims} float32 = {expect} bytes",
        )
    return np.frombuffer(req.kv_bytes, dtype=KV_DTYPE).reshape(shape)
