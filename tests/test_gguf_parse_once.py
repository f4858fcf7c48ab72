"""core/models/fetch.py's GGUF metadata reads on files written with gguf's GGUFWriter: the special tokens and chat
template as the file gives them, and `one_parse_per_file`, under which every reader of one path (transformers'
three and ours) shares one parse."""

import gguf
import numpy as np
from gguf import GGUFReader, GGUFWriter

from core.models.fetch import gguf_chat_template, gguf_special_token_ids, one_parse_per_file

TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['content'] }}{% endfor %}"


def write_gguf(path):
    writer = GGUFWriter(str(path), "qwen2")
    writer.add_token_list([f"tok{i}" for i in range(300)] + ["ünï"])
    writer.add_bos_token_id(7)
    writer.add_eos_token_id(151645)
    writer.add_pad_token_id(0)
    writer.add_chat_template(TEMPLATE)
    writer.add_tensor("w", np.ones((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_the_special_tokens_and_template_are_the_files(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    assert gguf_special_token_ids(path) == {"bos_token": 7, "eos_token": 151645, "pad_token": 0}
    assert gguf_chat_template(path) == TEMPLATE


def test_within_one_parse_per_file_each_path_is_parsed_once_and_the_class_comes_back(tmp_path, monkeypatch):
    parsed = []

    class CountingReader(GGUFReader):
        def __init__(self, path, mode="r"):
            parsed.append(str(path))
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    path, other = tmp_path / "m.gguf", tmp_path / "other.gguf"
    write_gguf(path)
    write_gguf(other)
    with one_parse_per_file():
        from gguf import GGUFReader as reader_in_the_block  # as transformers imports it, inside its function

        first = reader_in_the_block(str(path))
        assert reader_in_the_block(path) is first
        assert gguf_special_token_ids(path)["bos_token"] == 7 and gguf_chat_template(path) == TEMPLATE
        assert reader_in_the_block(other) is not first
    assert parsed == [str(path), str(other)]
    assert gguf.GGUFReader is CountingReader
    gguf_special_token_ids(path)  # outside the block: a parse of its own again
    assert len(parsed) == 3
