"""The user-defined pieces of a SentencePiece model (the reserved symbols it was trained with: a multilingual
task's language tags), read from the model's bytes: the library's processor does not say which pieces they are,
and reading its protobuf with the protobuf package would make that package a dependency for three fields."""

from __future__ import annotations

USER_DEFINED = 4  # sentencepiece_model.proto: SentencePiece.Type.USER_DEFINED
_NORMAL = 1  # a piece that states no type


def user_defined_pieces(proto: bytes) -> dict[str, int]:
    """piece -> id of every user-defined piece of a serialized ModelProto (field 1: the pieces in id order, each
    with its text in field 1 and its type in field 3)."""
    found, index = {}, 0
    for field, value in _fields(proto):
        if field != 1 or not isinstance(value, bytes):
            continue
        text, kind = "", _NORMAL
        for inner, inner_value in _fields(value):
            if inner == 1 and isinstance(inner_value, bytes):
                text = inner_value.decode("utf-8")
            elif inner == 3 and isinstance(inner_value, int):
                kind = inner_value
        if kind == USER_DEFINED:
            found[text] = index
        index += 1
    return found


def _fields(data: bytes):
    """(field number, value) of each field of a protobuf message: varints as ints, length-delimited fields as bytes,
    fixed-width ones as their raw bytes' length (unused here)."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(data, position)
            yield field, value
        elif wire == 2:
            length, position = _varint(data, position)
            yield field, data[position:position + length]
            position += length
        elif wire == 5:
            position += 4
        elif wire == 1:
            position += 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
