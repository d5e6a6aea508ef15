"""The protobuf descriptor set an operator points Ackboard at (``ACKBOARD_PROTO_DESCRIPTORS``):
loaded once per path, checked at start for the types the decoder rules name, and read
for a message type's class and its field names (``dashboard.display.decoders`` decodes
with them; redaction checks the names when a message cannot be parsed).

Never imports Django. The protobuf library is imported on first use only.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.protobuf.descriptor_pool import DescriptorPool

#: Largest descriptor set read (a descriptor set of thousands of messages is a few MB).
MAX_DESCRIPTOR_BYTES = 64 * 1024 * 1024


@lru_cache(maxsize=4)
def descriptors_load(path: str) -> DescriptorPool:
    """The descriptor set at ``path`` (a ``FileDescriptorSet``, as ``protoc
    --include_imports --descriptor_set_out`` or ``buf build -o`` writes it) as a pool.
    Raises ValueError saying what is wrong with the file."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message import DecodeError

    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_DESCRIPTOR_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_DESCRIPTOR_BYTES:
        raise ValueError(f"{path} is larger than {MAX_DESCRIPTOR_BYTES} bytes")
    try:
        files = descriptor_pb2.FileDescriptorSet.FromString(data).file
    except DecodeError:
        raise ValueError(f"{path} is not a protobuf FileDescriptorSet") from None
    pool = descriptor_pool.DescriptorPool()
    pending = {f.name: f for f in files}
    while pending:  # dependencies first, whatever the file's order
        ready = [f for f in pending.values() if all(d not in pending for d in f.dependency)]
        if not ready:
            missing = sorted({d for f in pending.values() for d in f.dependency} - set(pending))
            raise ValueError(f"{path}: imports missing from the set ({', '.join(missing)})")
        for f in ready:
            try:
                pool.Add(f)
            except Exception as exc:  # the library's own errors are of several types
                raise ValueError(f"{path}: {f.name} cannot be loaded ({exc})") from None
            del pending[f.name]
    return pool


def protobuf_check(path: str, types: set[str]) -> None:
    """Raises ValueError unless the set at ``path`` loads and holds every type."""
    pool = descriptors_load(path)
    for name in sorted(types):
        try:
            pool.FindMessageTypeByName(name)
        except KeyError:
            raise ValueError(f"{path} has no message type {name}") from None


@lru_cache(maxsize=64)
def protobuf_field_names(path: str, type_name: str) -> frozenset[str]:
    """Every field name of ``type_name`` and of the message types it holds, nested (what
    redaction checks when a message cannot be parsed: its bytes hold no names)."""
    names: set[str] = set()
    seen: set[str] = set()
    todo = [descriptors_load(path).FindMessageTypeByName(type_name)]
    while todo:
        message = todo.pop()
        if message.full_name in seen:
            continue
        seen.add(message.full_name)
        for item in message.fields:
            names.add(item.name)
            if item.message_type is not None:
                todo.append(item.message_type)
    return frozenset(names)


@lru_cache(maxsize=64)
def message_class(path: str, name: str) -> Any:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptors_load(path).FindMessageTypeByName(name))
