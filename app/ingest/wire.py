"""Decoding pushed log batches (Loki push API, OTLP/HTTP logs; protobuf or JSON) into streams of timed lines.

A small protobuf wire reader covers the few messages involved (Loki's PushRequest, OTLP's
ExportLogsServiceRequest), so the server needs no generated code and no protobuf runtime: each
field is read once, straight from the body. Anything malformed raises `BadPush` (a 400).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass

SOURCE = "source"  # the record's own time (Loki entry time, OTLP timeUnixNano)
OBSERVED = "observed"  # only OTLP observedTimeUnixNano: when the collector saw it, not when it was written
NONE = "none"  # no time at all

MAX_DEPTH = 8  # OTLP kvlist/array nesting we follow into (labels only need the top level)


class BadPush(ValueError):
    """A body that does not decode as the message its content type names (answered with 400)."""


@dataclass(frozen=True)
class Entry:
    """One pushed line with its time in nanoseconds since the epoch and where that time came from."""

    time_ns: int
    time_kind: str
    line: str


@dataclass
class Stream:
    """Lines sharing one label set (a Loki stream; OTLP records with the same resource and attributes)."""

    labels: dict[str, str]
    entries: list[Entry]


# ---- protobuf wire format -------------------------------------------------------------------


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise BadPush("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise BadPush("varint longer than 10 bytes")


def fields(buf: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value or start, end) of each field of buf[start:end].

    Length-delimited fields give their payload's (start, end); varints and fixed values give (value, 0).
    """
    pos = start
    stop = len(buf) if end is None else end
    while pos < stop:
        key, pos = _varint(buf, pos, stop)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise BadPush("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos, stop)
            yield number, 0, value, 0
        elif wire == 2:
            length, pos = _varint(buf, pos, stop)
            if pos + length > stop:
                raise BadPush("length-delimited field runs past its message")
            yield number, 2, pos, pos + length
            pos += length
        elif wire == 1:
            if pos + 8 > stop:
                raise BadPush("truncated fixed64")
            yield number, 1, int.from_bytes(buf[pos : pos + 8], "little"), 0
            pos += 8
        elif wire == 5:
            if pos + 4 > stop:
                raise BadPush("truncated fixed32")
            yield number, 5, int.from_bytes(buf[pos : pos + 4], "little"), 0
            pos += 4
        else:
            raise BadPush(f"unsupported wire type {wire}")


def _text(buf: bytes, start: int, end: int) -> str:
    try:
        return buf[start:end].decode("utf-8")
    except UnicodeDecodeError:
        raise BadPush("a string field is not valid UTF-8") from None


# ---- Loki -----------------------------------------------------------------------------------


def loki_proto(body: bytes) -> list[Stream]:
    """Streams of a Loki `logproto.PushRequest` (already snappy-decoded)."""
    streams: list[Stream] = []
    for number, wire, start, end in fields(body):
        if number != 1 or wire != 2:
            continue
        labels_text = ""
        entries: list[Entry] = []
        for n, w, s, e in fields(body, start, end):
            if n == 1 and w == 2:
                labels_text = _text(body, s, e)
            elif n == 2 and w == 2:
                entries.append(_loki_entry(body, s, e))
        streams.append(Stream(parse_loki_labels(labels_text), entries))
    return streams


def _loki_entry(buf: bytes, start: int, end: int) -> Entry:
    seconds = nanos = 0
    line = ""
    for n, w, s, e in fields(buf, start, end):
        if n == 1 and w == 2:
            for tn, tw, value, _ in fields(buf, s, e):
                if tn == 1 and tw == 0:
                    seconds = value - (1 << 64) if value >= 1 << 63 else value
                elif tn == 2 and tw == 0:
                    nanos = value & 0xFFFFFFFF
        elif n == 2 and w == 2:
            line = _text(buf, s, e)
    time_ns = seconds * 1_000_000_000 + nanos
    return Entry(time_ns, SOURCE if time_ns > 0 else NONE, line)


def parse_loki_labels(text: str) -> dict[str, str]:
    """`{a="b", c="d\\"e"}` (Prometheus label syntax, as Loki clients send it) to a dict."""
    labels: dict[str, str] = {}
    body = text.strip()
    if not body:
        return labels
    if not (body.startswith("{") and body.endswith("}")):
        raise BadPush('stream labels are not in {name="value", ...} form')
    pos, end = 1, len(body) - 1
    while pos < end:
        while pos < end and body[pos] in " ,":
            pos += 1
        if pos >= end:
            break
        eq = body.find("=", pos, end)
        if eq < 0:
            raise BadPush("a stream label has no value")
        name = body[pos:eq].strip()
        pos = eq + 1
        if pos >= end or body[pos] != '"':
            raise BadPush("a stream label value is not quoted")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= end:
                raise BadPush("a stream label value is not closed")
            char = body[pos]
            if char == "\\" and pos + 1 < end:
                nxt = body[pos + 1]
                chars.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
                pos += 2
                continue
            if char == '"':
                pos += 1
                break
            chars.append(char)
            pos += 1
        if not name:
            raise BadPush("a stream label has an empty name")
        labels[name] = "".join(chars)
    return labels


def loki_json(body: bytes) -> list[Stream]:
    """Streams of Loki's JSON push body: {"streams": [{"stream": {labels}, "values": [["<ns>", "line"], ...]}]}."""
    data = _json(body)
    raw_streams = data.get("streams") if isinstance(data, dict) else None
    if not isinstance(raw_streams, list):
        raise BadPush('the JSON body has no "streams" list')
    streams: list[Stream] = []
    for item in raw_streams:
        if not isinstance(item, dict):
            raise BadPush("a stream is not an object")
        labels = item.get("stream", {})
        if isinstance(item.get("labels"), str):  # the older form: "labels": "{a=\"b\"}"
            labels = parse_loki_labels(item["labels"])
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise BadPush("stream labels must be an object of strings")
        entries: list[Entry] = []
        values = item.get("values", item.get("entries"))
        if not isinstance(values, list):
            raise BadPush('a stream has no "values" list')
        for value in values:
            if isinstance(value, list) and len(value) >= 2 and isinstance(value[1], str):
                time_ns = _ns_of(value[0])
            elif isinstance(value, dict) and isinstance(value.get("line"), str):
                time_ns, value = _rfc3339_ns(value.get("ts")), [None, value["line"]]
            else:
                raise BadPush('a stream value is not ["<unix ns>", "<line>"]')
            entries.append(Entry(time_ns, SOURCE if time_ns > 0 else NONE, value[1]))
        streams.append(Stream(dict(labels), entries))
    return streams


def _ns_of(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadPush("a timestamp is not a string of unix nanoseconds")
    try:
        number = int(value)
    except ValueError:
        raise BadPush("a timestamp is not a string of unix nanoseconds") from None
    if not 0 <= number < 1 << 63:
        raise BadPush("a timestamp is out of range")
    return number


def _rfc3339_ns(value: object) -> int:
    import datetime as dt

    if not isinstance(value, str):
        return 0
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadPush("an entry timestamp is not RFC 3339") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp()) * 1_000_000_000 + parsed.microsecond * 1000


def _json(body: bytes) -> object:
    try:
        return json.loads(body)  # bytes: invalid UTF-8 raises UnicodeDecodeError (a ValueError)
    except (ValueError, RecursionError):
        raise BadPush("the body is not valid UTF-8 JSON") from None


# ---- OTLP -----------------------------------------------------------------------------------


def otlp_proto(body: bytes) -> list[Stream]:
    """Streams of an OTLP `ExportLogsServiceRequest`: one per distinct resource + record attribute set."""
    grouped: dict[tuple[tuple[str, str], ...], Stream] = {}
    for number, wire, start, end in fields(body):
        if number != 1 or wire != 2:
            continue
        resource: dict[str, str] = {}
        scopes: list[tuple[int, int]] = []
        for n, w, s, e in fields(body, start, end):
            if n == 1 and w == 2:
                for rn, rw, rs, re in fields(body, s, e):
                    if rn == 1 and rw == 2:
                        _key_value(body, rs, re, resource)
            elif n == 2 and w == 2:
                scopes.append((s, e))
        for s, e in scopes:
            for n, w, rs, re in fields(body, s, e):
                if n == 2 and w == 2:
                    attributes, entry = _otlp_record(body, rs, re)
                    _group(grouped, {**resource, **attributes}, entry)
    return list(grouped.values())


def _group(grouped: dict[tuple[tuple[str, str], ...], Stream], labels: dict[str, str], entry: Entry) -> None:
    key = tuple(sorted(labels.items()))
    stream = grouped.get(key)
    if stream is None:
        stream = grouped[key] = Stream(labels, [])
    stream.entries.append(entry)


def _otlp_record(buf: bytes, start: int, end: int) -> tuple[dict[str, str], Entry]:
    time_ns = observed_ns = 0
    line = ""
    attributes: dict[str, str] = {}
    for n, w, s, e in fields(buf, start, end):
        if n == 1 and w == 1:
            time_ns = s
        elif n == 11 and w == 1:
            observed_ns = s
        elif n == 5 and w == 2:
            line = _any_value(buf, s, e, 0)
        elif n == 6 and w == 2:
            _key_value(buf, s, e, attributes)
    return attributes, _timed(time_ns, observed_ns, line)


def _timed(time_ns: int, observed_ns: int, line: str) -> Entry:
    if time_ns > 0:
        return Entry(time_ns, SOURCE, line)
    if observed_ns > 0:
        return Entry(observed_ns, OBSERVED, line)
    return Entry(0, NONE, line)


def _key_value(buf: bytes, start: int, end: int, into: dict[str, str]) -> None:
    key, value = "", ""
    for n, w, s, e in fields(buf, start, end):
        if n == 1 and w == 2:
            key = _text(buf, s, e)
        elif n == 2 and w == 2:
            value = _any_value(buf, s, e, 0)
    if key:
        into[key] = value


def _any_value(buf: bytes, start: int, end: int, depth: int) -> str:
    """An OTLP AnyValue as text (strings as they are; numbers, booleans and bytes printed; lists as JSON)."""
    if depth > MAX_DEPTH:
        raise BadPush("an attribute value nests too deep")
    for n, w, s, e in fields(buf, start, end):
        if n == 1 and w == 2:
            return _text(buf, s, e)
        if n == 2 and w == 0:
            return "true" if s else "false"
        if n == 3 and w == 0:
            return str(s - (1 << 64) if s >= 1 << 63 else s)
        if n == 4 and w == 1:
            number = struct.unpack("<d", s.to_bytes(8, "little"))[0]
            return repr(number) if math.isfinite(number) else str(number)
        if n in (5, 6) and w == 2:
            parts = [_any_value(buf, vs, ve, depth + 1) for vn, vw, vs, ve in fields(buf, s, e) if vw == 2]
            return json.dumps(parts)
        if n == 7 and w == 2:
            return buf[s:e].hex()
    return ""


def otlp_json(body: bytes) -> list[Stream]:
    """Streams of OTLP/JSON (`resourceLogs[].scopeLogs[].logRecords[]`, camelCase as the spec maps it)."""
    data = _json(body)
    resource_logs = data.get("resourceLogs") if isinstance(data, dict) else None
    if not isinstance(resource_logs, list):
        raise BadPush('the JSON body has no "resourceLogs" list')
    grouped: dict[tuple[tuple[str, str], ...], Stream] = {}
    for item in resource_logs:
        if not isinstance(item, dict):
            raise BadPush("a resourceLogs item is not an object")
        resource = _json_attributes((item.get("resource") or {}).get("attributes"))
        for scope in _list_of(item.get("scopeLogs")):
            for record in _list_of(scope.get("logRecords")):
                body_value = record.get("body")
                line = _json_any(body_value) if body_value is not None else ""
                entry = _timed(_json_ns(record.get("timeUnixNano")), _json_ns(record.get("observedTimeUnixNano")), line)
                _group(grouped, {**resource, **_json_attributes(record.get("attributes"))}, entry)
    return list(grouped.values())


def _list_of(value: object) -> list[dict[str, object]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise BadPush("expected a list of objects")
    return value


def _json_ns(value: object) -> int:
    if value is None or value == "":
        return 0
    return _ns_of(value)


def _json_attributes(value: object) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in _list_of(value):
        key = item.get("key")
        if isinstance(key, str) and key:
            out[key] = _json_any(item.get("value"))
    return out


def _json_any(value: object, depth: int = 0) -> str:
    if depth > MAX_DEPTH:
        raise BadPush("an attribute value nests too deep")
    if not isinstance(value, dict):
        raise BadPush("an AnyValue is not an object")
    if isinstance(value.get("stringValue"), str):
        return str(value["stringValue"])
    for name in ("intValue", "doubleValue", "bytesValue"):
        if name in value:
            return str(value[name])
    if "boolValue" in value:
        return "true" if value["boolValue"] else "false"
    for name, inner in (("arrayValue", "values"), ("kvlistValue", "values")):
        if isinstance(value.get(name), dict):
            items = value[name].get(inner) or []
            if not isinstance(items, list):
                raise BadPush("an array value is not a list")
            return json.dumps([_json_any(i.get("value", i) if isinstance(i, dict) else i, depth + 1) for i in items])
    return ""
