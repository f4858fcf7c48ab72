"""A few metadata values of a GGUF file, read without parsing the rest.

`gguf.GGUFReader` builds an object for every element of every metadata array: Qwen2.5-Coder-0.5B's 151k-token
vocabulary cost it 29.5 s on 2 cores, and `recipezoo fetch-model` needs only the chat template and four token
ids. This reader walks the key/value section once, skips the arrays by their lengths, and stops when it has the
keys asked for (0.5 s for that file). The layout (GGUF v2/v3, little-endian): magic `GGUF`, version u32, tensor
count u64, key/value count u64, then per pair a string key, a u32 value type and the value
(https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

STRING, ARRAY = 8, 9
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class GGUFMetadataError(ValueError):
    pass


def read_gguf_metadata(path: str | Path, keys: set[str]) -> dict[str, object]:
    """The values of those `keys` that the file's metadata holds (numbers, bools, strings; arrays are skipped)."""
    with open(path, "rb") as file:
        if file.read(4) != b"GGUF":
            raise GGUFMetadataError(f"{path}: not a GGUF file (no GGUF magic at its start)")
        version, _tensors, pairs = struct.unpack("<IQQ", read_exactly(file, 20, path))
        if version not in (2, 3):
            raise GGUFMetadataError(f"{path}: GGUF version {version}; this reader knows versions 2 and 3")
        found: dict[str, object] = {}
        for _ in range(pairs):
            if len(found) == len(keys):
                break
            key = read_string(file, path)
            (kind,) = struct.unpack("<I", read_exactly(file, 4, path))
            if key in keys and kind != ARRAY:
                found[key] = read_value(file, kind, path)
            else:
                skip_value(file, kind, path)
        return found


def read_exactly(file: BinaryIO, size: int, path: str | Path) -> bytes:
    data = file.read(size)
    if len(data) != size:
        raise GGUFMetadataError(f"{path}: the metadata ends early (wanted {size} bytes at offset {file.tell()})")
    return data


def read_string(file: BinaryIO, path: str | Path) -> str:
    (size,) = struct.unpack("<Q", read_exactly(file, 8, path))
    return read_exactly(file, size, path).decode("utf-8")


def read_value(file: BinaryIO, kind: int, path: str | Path) -> object:
    if kind == STRING:
        return read_string(file, path)
    if kind not in SCALARS:
        raise GGUFMetadataError(f"{path}: unknown metadata value type {kind}")
    form = SCALARS[kind]
    return struct.unpack(form, read_exactly(file, struct.calcsize(form), path))[0]


def skip_value(file: BinaryIO, kind: int, path: str | Path) -> None:
    if kind == STRING:
        (size,) = struct.unpack("<Q", read_exactly(file, 8, path))
        file.seek(size, 1)
    elif kind == ARRAY:
        element, count = struct.unpack("<IQ", read_exactly(file, 12, path))
        if element in SCALARS:
            file.seek(struct.calcsize(SCALARS[element]) * count, 1)
        else:  # strings (a vocabulary) or nested arrays: each element says its own length
            for _ in range(count):
                skip_value(file, element, path)
    elif kind in SCALARS:
        file.seek(struct.calcsize(SCALARS[kind]), 1)
    else:
        raise GGUFMetadataError(f"{path}: unknown metadata value type {kind}")


@contextmanager
def one_parse_per_file() -> Iterator[None]:
    """Within the block, `gguf.GGUFReader(path)` parses each path once: transformers' GGUF loading makes a reader
    for the tokenizer, another for the config and a third for the weights, each paying the full metadata parse.
    transformers imports the class when it loads (`from gguf import GGUFReader` inside its function), so the
    module attribute is what it gets; a reader is only read from, so sharing one is safe."""
    import gguf

    original, readers = gguf.GGUFReader, {}

    def shared_reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared_reader
    try:
        yield
    finally:
        gguf.GGUFReader = original
