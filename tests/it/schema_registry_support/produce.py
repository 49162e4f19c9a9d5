#!/usr/bin/env python3
"""Produces test records in the Confluent wire format with an independent encoder —
confluent-kafka's AvroSerializer, ProtobufSerializer and JSONSerializer, which register
their schemas with the registry given — and writes, beside them, the JSON that sluice must
make of each record (--expected, NDJSON, one line per record in order), computed here from
the values that were encoded, not by decoding what was written.

    produce.py --brokers B --registry URL --topic T --format avro|protobuf|json_schema
               --count N [--start K] [--version 1|2] [--key-format string|avro]
               [--partitions P] [--proto-schema text|serialized]
               [--registry-user U --registry-password P] [--no-register]
               --expected out.ndjson [--wire out.ndjson]

Records are deterministic from their index i (K .. K+N-1), which is also their `id` and
their key (the id as text: a plain UTF-8 key, or with --key-format avro an Avro string
through AvroSerializer, subject `<topic>-key`). --partitions P sends record i to partition
i % P; without it the client's partitioner places each by its key. --wire writes the
encoded messages to a file ({"key_hex", "value_hex", "partition"} per line) instead of
producing them, so a test can send them later (with the registry down, say, or cut).

--proto-schema text (the default) registers the .proto source text, as Confluent's,
Redpanda's, Apicurio's and Karapace's registries store and serve Protobuf schemas; the
serializer's own registration is the base64 of a FileDescriptorProto (what the Python
client sends; Confluent's registry stores it as .proto text), which --proto-schema
serialized registers as it is. Both register common.proto (the Address message) as a
reference, subject `sluice/test/common.proto`; google/protobuf/*.proto are not registered
(the serializer skips well-known types: a registry knows them).

The mapping the expected JSON follows (what sluice documents):
  Avro: int/long exact; float/double the shortest text that round-trips to that float
  (f32) or double, NaN/Infinity/-Infinity as strings; bytes and fixed as base64 (standard,
  padded); enum its symbol; a union the branch's value, no wrapper; decimal (bytes or
  fixed) a number with exactly `scale` digits after the point; date YYYY-MM-DD; time-millis
  HH:MM:SS.mmm; time-micros HH:MM:SS.uuuuuu; timestamp-millis/micros RFC 3339 UTC with 3/6
  digits and Z; local-timestamp-* the same without Z; uuid the text.
  Protobuf: proto3 canonical JSON with the field names as written in the .proto; 64-bit
  integers as JSON integers; enums by name; Timestamp RFC 3339 with Z and 0/3/6/9 fraction
  digits; Duration "1.500s"; wrappers the wrapped value; Struct JSON; bytes base64; every
  field without presence at its value even when it is the default; a field with presence
  (a message, a wrapper, a oneof member, a proto3 `optional`) absent when it is not set.
  JSON Schema: the JSON as written.
"""

import argparse
import base64
import datetime
import json
import math
import os
import struct
import sys
import tempfile
import uuid
from decimal import Decimal

from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext


# --- The expected JSON, written exactly ------------------------------------------------


class F32:
    """A float (Avro float, Protobuf float): shown by the shortest text that reads back as
    the same 32-bit value."""

    def __init__(self, value):
        self.value = struct.unpack("<f", struct.pack("<f", value))[0]


def f32_text(x):
    if math.isnan(x) or math.isinf(x):
        raise ValueError("non-finite floats are written as strings")
    for digits in range(1, 12):
        text = "%.*g" % (digits, x)
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == x:
            return text  # '1e-05' is valid JSON
    raise AssertionError(x)


def dumps(value):
    """JSON text of `value`: Decimal as its exact digits, F32 as its shortest text, float
    as repr (the shortest round-trip text of a double), non-ASCII as is."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, F32):
        return f32_text(value.value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError("non-finite floats are written as strings")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + dumps(v) for k, v in value.items()) + "}"
    raise TypeError(type(value))


def special(x):
    """A double as the mapping shows it: a number, or "NaN" / "Infinity" / "-Infinity"."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def special32(x):
    f = F32(x)
    if math.isnan(f.value) or math.isinf(f.value):
        return special(f.value)
    return f


def b64(data):
    return base64.standard_b64encode(bytes(data)).decode("ascii")


EPOCH = datetime.datetime(1970, 1, 1)


def clock(dt):
    return f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"


def timestamp(units, per_second, digits, zone):
    seconds, fraction = divmod(units, per_second)  # floor: 1969 counts down correctly
    return clock(EPOCH + datetime.timedelta(seconds=seconds)) + f".{fraction:0{digits}d}" + zone


def date(days):
    d = datetime.date(1970, 1, 1) + datetime.timedelta(days=days)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


def time_of_day(units, per_second, digits):
    seconds, fraction = divmod(units, per_second)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h:02d}:{m:02d}:{s:02d}.{fraction:0{digits}d}"


def nanos_fraction(nanos):
    """Protobuf's canonical fraction: none, 3, 6 or 9 digits, the fewest that are exact."""
    if nanos == 0:
        return ""
    if nanos % 1_000_000 == 0:
        return f".{nanos // 1_000_000:03d}"
    if nanos % 1_000 == 0:
        return f".{nanos // 1_000:06d}"
    return f".{nanos:09d}"


def proto_timestamp(seconds, nanos):
    return clock(EPOCH + datetime.timedelta(seconds=seconds)) + nanos_fraction(nanos) + "Z"


def proto_duration(seconds, nanos):
    total = seconds * 1_000_000_000 + nanos
    sign = "-" if total < 0 else ""
    whole, fraction = divmod(abs(total), 1_000_000_000)
    return f"{sign}{whole}{nanos_fraction(fraction)}s"


def decimal(unscaled, scale):
    """An exact Decimal with exactly `scale` digits after the point (no rounding: built
    from text)."""
    return Decimal(f"{unscaled}E-{scale}") if scale else Decimal(unscaled)


# --- Avro --------------------------------------------------------------------------------

AVRO_FIELDS = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 18}},
    {
        "name": "fee",
        "type": {"type": "fixed", "name": "Fee", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 2},
    },
    {"name": "whole", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}},
    {"name": "ratio", "type": "double"},
    {"name": "score", "type": "float"},
    {"name": "flag", "type": "boolean"},
    {"name": "created_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "created_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED", "CANCELLED"]}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "coupon", "type": ["null", "long", "string"], "default": None},
    {
        "name": "address",
        "type": {
            "type": "record",
            "name": "Address",
            "fields": [
                {"name": "street", "type": "string"},
                {"name": "zip", "type": "string"},
                {
                    "name": "geo",
                    "type": [
                        "null",
                        {
                            "type": "record",
                            "name": "Geo",
                            "fields": [{"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}],
                        },
                    ],
                    "default": None,
                },
            ],
        },
    },
    {"name": "tags", "type": {"type": "array", "items": "int"}},
    {"name": "counters", "type": {"type": "map", "values": "long"}},
    {"name": "blob", "type": "bytes"},
    {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 4}},
    {
        "name": "lines",
        "type": {
            "type": "array",
            "items": {
                "type": "record",
                "name": "Line",
                "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
            },
        },
    },
]


def avro_schema(version):
    fields = list(AVRO_FIELDS)
    if version == 2:
        fields.append({"name": "currency", "type": "string", "default": "EUR"})
    return json.dumps({"type": "record", "name": "Order", "namespace": "sluice.test", "fields": fields})


def name_of(i):
    if i % 19 == 0:
        return f'tab\there "quoted" back\\slash \u0001 {i}'
    if i % 3 == 0:
        return f"Zoë Ångström №{i} — 日本語 🚀"
    return f"name {i}"


def avro_record(i, version):
    """(the value given to the serializer, the JSON sluice must make of it)."""
    sign = -1 if i % 7 == 0 else 1
    if i % 17 == 0:
        amount = 10**37 + i  # 38 digits, the whole precision
    elif i % 11 == 0:
        amount = i * 10**18  # trailing zeros kept: i.000000000000000000
    elif i % 9 == 0:
        amount = 5  # 0.000000000000000005
    else:
        amount = 12345678901234567890 + i * 7919  # 20 significant digits
    amount *= sign
    fee = (i * 12345) % 10**17 * sign
    whole = (10**19 + i) * sign

    if i % 101 == 0:
        ratio = float("nan")
    elif i % 103 == 0:
        ratio = float("inf")
    elif i % 107 == 0:
        ratio = float("-inf")
    elif i % 13 == 0:
        ratio = 1e-300 * i
    else:
        ratio = (i / 7) * (-1 if i % 2 else 1)
    score = i / 10 if i % 5 == 1 else (i % 1000) + 0.25  # 0.1, 0.6, …: not exact in f32

    created_ms = 1_614_834_367_089 + i * 1_234_567
    if i % 13 == 0:
        created_ms = -14_182_940_000 - i * 1_000_003  # before 1970
    created_us = 1_614_834_367_089_123 + i * 1_000_001
    if i % 13 == 0:
        created_us = -1 - i
    local_ms = 1_700_000_000_000 + i * 999
    local_us = 1_700_000_000_000_000 + i * 999_999
    day = 18_000 + i % 5_000 if i % 17 else -1 - i % 400
    t_ms = (i * 7919) % 86_400_000
    t_us = (i * 7_919_993) % 86_400_000_000
    uid = str(uuid.UUID(int=(i * 0x9E3779B97F4A7C15F39CC0605CEDC835) % 2**128))
    status = ["NEW", "PAID", "SHIPPED", "CANCELLED"][i % 4]
    note = None if i % 3 == 0 else f"note {i}"
    coupon = [None, 2**53 + i, f"C{i}"][i % 3]
    geo = None if i % 2 else {"lat": i / 1000, "lon": -i / 1000}
    address = {"street": f"{i} Rue de l'Église", "zip": f"{i % 100000:05d}", "geo": geo}
    tags = [i, -i, 2**31 - 1][: i % 4]
    counters = {} if i % 5 == 0 else {"a": i, "b": -(2**62) - i, "c ü": 0}
    blob = bytes((i * j) % 256 for j in range(i % 9))
    code = struct.pack(">I", i % 2**32)
    lines = [{"sku": f"SKU-{i}-{k}", "qty": k} for k in range(i % 3)]

    value = {
        "id": i,
        "name": name_of(i),
        "amount": decimal(amount, 18),
        "fee": decimal(fee, 2),
        "whole": decimal(whole, 0),
        "ratio": ratio,
        "score": score,
        "flag": i % 3 == 1,
        "created_ms": created_ms,
        "created_us": created_us,
        "local_ms": local_ms,
        "local_us": local_us,
        "day": day,
        "t_ms": t_ms,
        "t_us": t_us,
        "uid": uid,
        "status": status,
        "note": note,
        "coupon": coupon,
        "address": address,
        "tags": tags,
        "counters": counters,
        "blob": blob,
        "code": code,
        "lines": lines,
    }
    expected = dict(value)
    expected.update(
        {
            "ratio": special(ratio),
            "score": special32(score),
            "created_ms": timestamp(created_ms, 1000, 3, "Z"),
            "created_us": timestamp(created_us, 1_000_000, 6, "Z"),
            "local_ms": timestamp(local_ms, 1000, 3, ""),
            "local_us": timestamp(local_us, 1_000_000, 6, ""),
            "day": date(day),
            "t_ms": time_of_day(t_ms, 1000, 3),
            "t_us": time_of_day(t_us, 1_000_000, 6),
            "blob": b64(blob),
            "code": b64(code),
        }
    )
    if version == 2:
        if i % 2:
            value["currency"] = "USD"
            expected["currency"] = "USD"
        else:
            expected["currency"] = "EUR"  # left out: the schema's default is written
    return value, expected


# --- Protobuf ----------------------------------------------------------------------------

COMMON_PROTO = """syntax = "proto3";

package sluice.test;

// In a file of its own: registered as a reference of order.proto.
message Address {
  string street = 1;
  string zip = 2;
}
"""

ORDER_PROTO = """syntax = "proto3";

package sluice.test;

import "google/protobuf/duration.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "sluice/test/common.proto";

enum Status {
  STATUS_UNSPECIFIED = 0;
  NEW = 1;
  PAID = 2;
  SHIPPED = 3;
}

// First in the file, so Order's message index is [1], not the [0] the wire shortens.
message Meta {
  string source = 1;
}

message Order {
  message Line {
    string sku = 1;
    uint32 qty = 2;
  }
  int64 id = 1;
  string name = 2;
  uint64 big = 3;
  sint64 delta = 4;
  fixed64 checksum = 5;
  int32 small = 6;
  double ratio = 7;
  float score = 8;
  bool flag = 9;
  Status status = 10;
  google.protobuf.Timestamp created = 11;
  google.protobuf.Duration elapsed = 12;
  google.protobuf.Int32Value quantity = 13;
  google.protobuf.StringValue nickname = 14;
  Address address = 15;
  repeated int32 tags = 16;
  map<string, int64> counters = 17;
  bytes blob = 18;
  google.protobuf.Struct attributes = 19;
  repeated Line lines = 20;
  oneof payment {
    string card = 21;
    int64 voucher = 22;
  }
  optional string comment = 23;
}
"""

PROTO_FILES = {"sluice/test/common.proto": COMMON_PROTO, "sluice/test/order.proto": ORDER_PROTO}


def proto_classes():
    """Compiles the .proto text with protoc (grpcio-tools) into a descriptor set, loads it
    into a pool of its own and returns (Order class, {base64 FileDescriptorProto: text})."""
    import grpc_tools
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        for name, text in PROTO_FILES.items():
            path = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        out = os.path.join(tmp, "set.pb")
        wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        status = protoc.main(
            ["protoc", f"-I{tmp}", f"-I{wkt}", f"--descriptor_set_out={out}", "--include_imports", "sluice/test/order.proto"]
        )
        if status != 0:
            sys.exit(f"protoc failed: {status}")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    texts = {}
    for file in fds.file:  # dependencies first
        pool.Add(file)
        if file.name in PROTO_FILES:
            texts[b64(pool.FindFileByName(file.name).serialized_pb)] = PROTO_FILES[file.name]
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("sluice.test.Order"))
    return order, texts


def proto_record(i, Order):
    """(the message, the JSON sluice must make of it). i % 10 == 0: every field at its
    default and no field with presence set."""
    m = Order()
    m.id = i
    e = {"id": i}
    if i % 10 == 0:
        e.update(
            {
                "name": "",
                "big": 0,
                "delta": 0,
                "checksum": 0,
                "small": 0,
                "ratio": 0.0,
                "score": 0.0,
                "flag": False,
                "status": "STATUS_UNSPECIFIED",
                "tags": [],
                "counters": {},
                "blob": "",
                "lines": [],
            }
        )
        return m, e

    m.name = name_of(i)
    e["name"] = m.name
    m.big = 2**63 + i * 2**20  # above 2^53 and above i64::MAX
    e["big"] = m.big
    m.delta = -(2**60) - i
    e["delta"] = m.delta
    m.checksum = 2**64 - 1 - i
    e["checksum"] = m.checksum
    m.small = -i if i % 2 else i
    e["small"] = m.small
    if i % 101 == 1:
        ratio = float("nan")
    elif i % 103 == 1:
        ratio = float("-inf")
    else:
        ratio = i / 7
    m.ratio = ratio
    e["ratio"] = special(ratio)
    score = i / 10 if i % 5 == 1 else (i % 1000) + 0.25
    m.score = score
    e["score"] = special32(score)
    m.flag = i % 3 == 1
    e["flag"] = m.flag
    m.status = i % 4
    e["status"] = ["STATUS_UNSPECIFIED", "NEW", "PAID", "SHIPPED"][i % 4]

    seconds = 1_600_000_000 + i * 37 if i % 13 else -63_072_000 - i  # some before 1970
    nanos = [0, 123_000_000, 123_456_000, 123_456_789][i % 4]
    m.created.seconds = seconds
    m.created.nanos = nanos
    e["created"] = proto_timestamp(seconds, nanos)

    if i % 5 != 2:
        d_seconds, d_nanos = i % 100, [0, 500_000_000, 1_000, 7][i % 4]
        if i % 6 == 5:
            d_seconds, d_nanos = -d_seconds, -d_nanos
        m.elapsed.seconds = d_seconds
        m.elapsed.nanos = d_nanos
        e["elapsed"] = proto_duration(d_seconds, d_nanos)
    if i % 2 == 0:
        m.quantity.SetInParent()
        m.quantity.value = i % 1000  # 0 for some: present all the same
        e["quantity"] = i % 1000
    if i % 3 == 0:
        m.nickname.SetInParent()
        m.nickname.value = "" if i % 9 == 0 else f"nick {i}"
        e["nickname"] = m.nickname.value
    if i % 7:
        m.address.SetInParent()
        m.address.street = f"{i} Rue de l'Église" if i % 4 else ""
        m.address.zip = f"{i % 100000:05d}"
        e["address"] = {"street": m.address.street, "zip": m.address.zip}
    tags = [i, -i, 2**31 - 1][: i % 4]
    m.tags.extend(tags)
    e["tags"] = tags
    counters = {} if i % 5 == 0 else {"a": i, "b": -(2**62) - i, "c ü": 0}
    for k, v in counters.items():
        m.counters[k] = v
    e["counters"] = counters
    blob = bytes((i * j) % 256 for j in range(i % 9))
    m.blob = blob
    e["blob"] = b64(blob)
    if i % 4 == 1:
        attributes = {"k": f"v{i}", "n": i + 0.5, "list": [1.0, "x", None, True], "nested": {"a": None, "b": False}}
        m.attributes.SetInParent()
        m.attributes.update(attributes)
        e["attributes"] = attributes
    lines = [{"sku": f"SKU-{i}-{k}", "qty": k} for k in range(i % 3)]
    for line in lines:
        m.lines.add(sku=line["sku"], qty=line["qty"])
    e["lines"] = lines
    if i % 3 == 0:
        m.card = f"4111-{i}"
        e["card"] = m.card
    elif i % 3 == 1:
        m.voucher = 2**53 + i + 1
        e["voucher"] = m.voucher
    if i % 4 == 1:
        m.comment = ""  # set, to the default: present
        e["comment"] = ""
    elif i % 4 != 0:
        m.comment = f"c{i}"
        e["comment"] = m.comment
    return m, e


class TextRegistry(SchemaRegistryClient):
    """Registers a Protobuf schema as its .proto text where the serializer sends the
    base64 of its FileDescriptorProto: what Confluent's registry does with such a
    registration (it stores and serves the text), done here on the client's side so the
    test registry can store schemas exactly as given."""

    def __init__(self, conf, texts):
        super().__init__(conf)
        self._texts = texts

    def _as_text(self, schema):
        text = self._texts.get(schema.schema_str)
        if text is None:
            return schema
        return Schema(text, schema.schema_type, schema.references)

    def register_schema_full_response(self, subject_name, schema, normalize_schemas=False):
        return super().register_schema_full_response(subject_name, self._as_text(schema), normalize_schemas)

    def lookup_schema(self, subject_name, schema, normalize_schemas=False, fmt=None, deleted=False):
        found = super().lookup_schema(subject_name, self._as_text(schema), normalize_schemas, fmt, deleted)
        return found


# --- JSON Schema -------------------------------------------------------------------------

JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "amount": {"type": "number"},
            "big": {"type": "integer"},
            "flag": {"type": "boolean"},
            "note": {"type": ["string", "null"]},
            "tags": {"type": "array", "items": {"type": "integer"}},
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["street"],
            },
            "attrs": {"type": "object"},
        },
        "required": ["id", "name", "amount"],
    }
)


def json_record(i):
    value = {
        "id": i,
        "name": name_of(i),
        "amount": [i / 3, 1e-7 * i, 1.5e300, -0.5, i + 0.25][i % 5],
        "big": 2**63 + i,
        "flag": i % 2 == 0,
        "note": None if i % 3 == 0 else f"note {i}",
        "tags": [i, -i, 0][: i % 4],
        "address": {"street": f"{i} Rue de l'Église", "zip": f"{i % 100000:05d}"},
        "attrs": {} if i % 4 else {"nested": {"deeper": [1, {"x": None}]}, "ü": "ß"},
    }
    if i % 5 == 0:
        del value["note"]  # absent, not null
    return value, value


# --- Producing ---------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", default=os.environ.get("SLUICE_TEST_KAFKA_BROKERS", "127.0.0.1:19092"))
    p.add_argument("--registry", required=True)
    p.add_argument("--registry-user")
    p.add_argument("--registry-password")
    p.add_argument("--topic", required=True)
    p.add_argument("--format", required=True, choices=["avro", "protobuf", "json_schema"])
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--start", type=int, default=1)
    p.add_argument("--version", type=int, default=1, choices=[1, 2])
    p.add_argument("--key-format", default="string", choices=["string", "avro"])
    p.add_argument("--partitions", type=int)
    p.add_argument("--partitions-keyed", action="store_true", help="the default: placed by key")
    p.add_argument("--proto-schema", default="text", choices=["text", "serialized"])
    p.add_argument("--no-register", action="store_true", help="look the schema up, do not register it")
    p.add_argument("--expected", required=True)
    p.add_argument("--wire", help="write the messages here instead of producing them")
    args = p.parse_args()

    conf = {"url": args.registry}
    if args.registry_user is not None:
        conf["basic.auth.user.info"] = f"{args.registry_user}:{args.registry_password or ''}"
    serializer_conf = {"auto.register.schemas": not args.no_register}

    if args.format == "avro":
        registry = SchemaRegistryClient(conf)
        value_serializer = AvroSerializer(registry, avro_schema(args.version), conf=serializer_conf)
        make = lambda i: avro_record(i, args.version)  # noqa: E731
    elif args.format == "protobuf":
        Order, texts = proto_classes()
        registry = TextRegistry(conf, texts) if args.proto_schema == "text" else SchemaRegistryClient(conf)
        value_serializer = ProtobufSerializer(Order, registry, conf=serializer_conf)
        make = lambda i: proto_record(i, Order)  # noqa: E731
    else:
        registry = SchemaRegistryClient(conf)
        value_serializer = JSONSerializer(JSON_SCHEMA, registry, conf=serializer_conf)
        make = json_record

    if args.key_format == "avro":
        key_serializer = AvroSerializer(registry, '"string"', conf=serializer_conf)
    else:
        key_serializer = lambda key, ctx: key.encode("utf-8")  # noqa: E731

    value_ctx = SerializationContext(args.topic, MessageField.VALUE)
    key_ctx = SerializationContext(args.topic, MessageField.KEY)

    failures = []
    delivered = [0]

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(str(err))
        else:
            delivered[0] += 1

    producer = None
    wire = None
    if args.wire:
        wire = open(args.wire, "w")
    else:
        producer = Producer(
            {
                "bootstrap.servers": args.brokers,
                "linger.ms": 20,
                "batch.num.messages": 10000,
                "acks": "all",
                # No retries: a retry could reorder a partition; a failure fails the run.
                "message.send.max.retries": 0,
            }
        )

    with open(args.expected, "w", encoding="utf-8") as expected:
        for i in range(args.start, args.start + args.count):
            value, shown = make(i)
            key = key_serializer(str(i), key_ctx)
            body = value_serializer(value, value_ctx)
            partition = i % args.partitions if args.partitions else None
            expected.write(dumps(shown) + "\n")
            if wire is not None:
                wire.write(json.dumps({"key_hex": key.hex(), "value_hex": body.hex(), "partition": partition}) + "\n")
                continue
            while True:
                try:
                    if partition is None:
                        producer.produce(args.topic, key=key, value=body, on_delivery=on_delivery)
                    else:
                        producer.produce(args.topic, key=key, value=body, partition=partition, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)

    if wire is not None:
        wire.close()
        print(args.count)
        return
    left = producer.flush(120)
    if left or failures or delivered[0] != args.count:
        sys.exit(f"produce.py: {delivered[0]} of {args.count} delivered, {left} left, failures: {failures[:5]}")
    print(delivered[0])


if __name__ == "__main__":
    main()
