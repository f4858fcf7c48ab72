"""core/models/gguf_metadata.py against gguf's own GGUFReader, on files written with gguf's GGUFWriter: the values
asked for, whatever arrays (a vocabulary of strings, numbers, nested arrays) stand before them; a cut or foreign
file is one error naming it."""

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter

from core.models.fetch import GGUF_SPECIAL_TOKENS, gguf_chat_template, gguf_special_token_ids
from core.models.gguf_metadata import GGUFMetadataError, one_parse_per_file, read_gguf_metadata

TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['content'] }}{% endfor %}"


def write_gguf(path):
    writer = GGUFWriter(str(path), "qwen2")
    writer.add_token_list([f"tok{i}" for i in range(300)] + ["ünï"])  # strings of varied lengths
    writer.add_token_scores([0.5] * 301)
    writer.add_array("test.nested", [[1, 2], [3]])
    writer.add_float32("test.scale", 0.25)
    writer.add_bool("test.flag", True)
    writer.add_bos_token_id(7)
    writer.add_eos_token_id(151645)
    writer.add_pad_token_id(0)
    writer.add_chat_template(TEMPLATE)
    writer.add_string("test.after", "last")
    writer.add_tensor("w", np.ones((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_the_values_asked_for_equal_gguf_readers_after_arrays_of_every_kind(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    fields = GGUFReader(str(path)).fields
    keys = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
            "test.scale", "test.flag", "test.after", "tokenizer.chat_template", "tokenizer.ggml.unknown_token_id"}
    values = read_gguf_metadata(path, keys)
    assert "tokenizer.ggml.unknown_token_id" not in values  # not in the file
    for key in keys - {"tokenizer.ggml.unknown_token_id"}:
        field = fields[key]
        expected = field.parts[field.data[0]]
        expected = bytes(expected).decode() if isinstance(values[key], str) else expected[0]
        assert values[key] == pytest.approx(expected), key
    assert gguf_special_token_ids(path) == {"bos_token": 7, "eos_token": 151645, "pad_token": 0}
    assert set(GGUF_SPECIAL_TOKENS) >= set(gguf_special_token_ids(path))
    assert gguf_chat_template(path) == TEMPLATE


def test_a_cut_or_foreign_file_is_one_error_naming_it(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:400])  # inside the vocabulary
    with pytest.raises(GGUFMetadataError, match=f"{cut}: the metadata ends early"):
        read_gguf_metadata(cut, {"tokenizer.chat_template"})
    foreign = tmp_path / "model.safetensors"
    foreign.write_bytes(b"\x00" * 64)
    with pytest.raises(GGUFMetadataError, match=f"{foreign}: not a GGUF file"):
        read_gguf_metadata(foreign, {"tokenizer.chat_template"})


def test_within_one_parse_per_file_each_path_is_parsed_once_and_the_class_comes_back(tmp_path):
    import gguf

    path = tmp_path / "m.gguf"
    write_gguf(path)
    with one_parse_per_file():
        from gguf import GGUFReader as reader_in_the_block  # as transformers imports it, inside its function

        first = reader_in_the_block(str(path))
        assert reader_in_the_block(path) is first
        assert first.fields["tokenizer.ggml.bos_token_id"].parts[-1][0] == 7
    assert gguf.GGUFReader is GGUFReader and GGUFReader(str(path)) is not first
