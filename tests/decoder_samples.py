"""Payloads in the formats the decoders read, made by the formats' own libraries.

``descriptor_set`` writes a protobuf descriptor set of package ``acme`` (``Payment``,
``Card``, the recursive ``Node``) built with ``descriptor_pb2``, as ``protoc
--include_imports --descriptor_set_out`` would write it, and ``proto_classes`` gives its
message classes; ``faststream_message`` is FastStream's own encoding of a Redis message.
No hand-made bytes: each sample is what a producer using that library sends.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="acme/payments.proto", package="acme")
    proto.syntax = "proto3"
    card = proto.message_type.add(name="Card")
    card.field.add(name="api_token", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    card.field.add(name="last4", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    payment = proto.message_type.add(name="Payment")
    payment.field.add(name="order", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    payment.field.add(name="cents", number=2, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL)
    payment.field.add(
        name="card", number=3, type=_F.TYPE_MESSAGE, type_name=".acme.Card",
        label=_F.LABEL_OPTIONAL,
    )  # fmt: skip
    payment.field.add(name="tags", number=4, type=_F.TYPE_STRING, label=_F.LABEL_REPEATED)
    payment.field.add(name="blob", number=5, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL)
    node = proto.message_type.add(name="Node")
    node.field.add(
        name="child", number=1, type=_F.TYPE_MESSAGE, type_name=".acme.Node",
        label=_F.LABEL_OPTIONAL,
    )  # fmt: skip
    node.field.add(name="v", number=2, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL)
    return proto


def descriptor_set(path: Path) -> str:
    """Writes the set to ``path``; returns its path as text (the setting's value)."""
    files = descriptor_pb2.FileDescriptorSet(file=[_file()])
    path.write_bytes(files.SerializeToString())
    return str(path)


def proto_classes() -> dict[str, Any]:
    """``{"Payment": class, "Card": class, "Node": class}`` from the same descriptors."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"acme.{name}"))
        for name in ("Payment", "Card", "Node")
    }


def payment(order: str, *, token: str = "", cents: int = 0, tags: tuple[str, ...] = ()) -> bytes:
    classes = proto_classes()
    message = classes["Payment"](order=order, cents=cents, tags=list(tags))
    if token:
        message.card.CopyFrom(classes["Card"](api_token=token, last4="4242"))
    return bytes(message.SerializeToString())


def nested_nodes(depth: int) -> bytes:
    """A ``Node`` nested ``depth`` levels deep (each level one more ``child``)."""
    node_class = proto_classes()["Node"]
    root = node_class(v=0)
    node = root
    for level in range(1, depth):
        node = node.child
        node.v = level
    return bytes(root.SerializeToString())


def faststream_message(body: Any, headers: dict[str, str] | None = None) -> bytes:
    """FastStream's binary Redis message of ``body`` (its ``BinaryMessageFormatV1``, the
    format ``RedisBroker.publish`` writes to a stream's ``__data__`` field)."""
    from faststream.redis.parser import BinaryMessageFormatV1

    encoded = BinaryMessageFormatV1.encode(
        message=body, reply_to=None, headers=headers, correlation_id="corr-1"
    )
    return asyncio.run(encoded)
