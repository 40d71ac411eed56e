"""The protobuf wire format by hand, for the messages that carry KV bytes.

Generated protobuf code copies a payload into the message, again when serializing and again when
parsing; for megabyte KV chunks those copies cost as much as moving the bytes. The KV store's and
the fabric's codecs build on these few primitives instead (their tests hold them to the generated
code's output).
"""

from __future__ import annotations

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


def write_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def write_key(out: bytearray, number: int, wire_type: int) -> None:
    write_varint(out, number << 3 | wire_type)


def read_varint(buf: bytes | memoryview, pos: int, what: str = "message") -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError(f"{what}: malformed varint (runs past the end of the message or over 64 bits)")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def parse_fields(buf: bytes | memoryview, what: str = "message") -> dict[int, int | bytes | memoryview]:
    """Field number -> last value for varint and length-delimited fields (slices of `buf`: pass a
    memoryview for zero-copy); fixed-width fields are skipped; malformed input is a ValueError."""
    fields: dict[int, int | bytes | memoryview] = {}
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos, what)
        number, wire_type = key >> 3, key & 7
        if wire_type == VARINT:
            fields[number], pos = read_varint(buf, pos, what)
        elif wire_type == LEN:
            length, pos = read_varint(buf, pos, what)
            if pos + length > end:
                raise ValueError(f"{what} truncated: a field runs past the end of the message")
            fields[number], pos = buf[pos : pos + length], pos + length
        elif wire_type in (FIXED64, FIXED32):  # a field this reader does not know
            pos += 8 if wire_type == FIXED64 else 4
        else:
            raise ValueError(f"{what}: unsupported wire type {wire_type}")
    return fields


def varint_field(fields: dict[int, int | bytes | memoryview], number: int, what: str = "message") -> int:
    """Field `number` of `parse_fields`' result as a varint, 0 when absent; bytes there: ValueError."""
    value = fields.get(number, 0)
    if not isinstance(value, int):
        raise ValueError(f"{what}: field {number} is length-delimited where a varint belongs")
    return value


def bytes_field(fields: dict[int, int | bytes | memoryview], number: int, what: str = "message") -> memoryview:
    """Field `number` of `parse_fields`' result as a view of its bytes, empty when absent; a varint
    there: ValueError."""
    value = fields.get(number, b"")
    if isinstance(value, int):
        raise ValueError(f"{what}: field {number} is a varint where bytes belong")
    return memoryview(value)
