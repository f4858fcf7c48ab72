"""`Batch`: combining and slicing rows, and the contract `check` enforces between stages."""

import numpy as np
import pytest
import torch

from core.batch import Batch, BatchContractError


def make_batch(size: int = 4, t_resp: int = 3) -> Batch:
    """Rows i = 0..size-1: responses filled with i, advantages with i / 10, uid f"u{i}"."""
    rows = torch.arange(size)
    responses = rows[:, None].repeat(1, t_resp)  # (B, T_resp)
    return Batch(
        {
            "responses": responses,
            "response_mask": torch.ones(size, t_resp, dtype=torch.long),
            "advantages": responses.float() / 10,
        },
        {"uid": [f"u{i}" for i in range(size)], "ground_truth": [[i, i] for i in range(size)]},
        {"step": 7},
    )


def assert_same_batch(a: Batch, b: Batch) -> None:
    assert a.keys() == b.keys()
    for key in a.tensors:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=f"tensor {key} differs")
    for key in a.non_tensors:
        assert list(a[key]) == list(b[key]), f"non-tensor {key} differs"


# ---- construction and access ---------------------------------------------------------------------
def test_equal_length_lists_stay_a_1d_object_array():
    batch = make_batch(4)
    assert batch["ground_truth"].shape == (4,)
    assert batch["ground_truth"][2] == [2, 2]


def test_len_comes_from_tensors_or_non_tensors():
    assert len(make_batch(5)) == 5
    assert len(Batch(non_tensors={"uid": ["a", "b"]})) == 2
    assert len(Batch()) == 0


def test_missing_key_error_lists_the_keys_present():
    with pytest.raises(KeyError, match=r"no key 'values'; it has \['advantages', 'ground_truth', .*'uid'\]"):
        make_batch()["values"]


# ---- union ---------------------------------------------------------------------------------------
def test_union_adds_the_other_batch_keys_and_meta():
    left = make_batch(4)
    right = Batch({"values": torch.zeros(4, 3)}, {"data_source": ["a"] * 4}, {"epoch": 1})
    out = left.union(right)
    assert set(out.keys()) == set(left.keys()) | {"values", "data_source"}
    assert out.meta == {"step": 7, "epoch": 1}
    assert "values" not in left  # a copy: the original is unchanged


def test_union_accepts_a_key_present_in_both_with_equal_values():
    batch = make_batch(4)
    out = batch.union(Batch({"responses": batch["responses"].clone()}, {"uid": list(batch["uid"])}))
    assert_same_batch(out, batch)


def test_union_with_a_conflicting_tensor_raises_naming_stage_and_key():
    batch = make_batch(4)
    other = Batch({"responses": batch["responses"] + 1})
    with pytest.raises(BatchContractError, match=r"\[reward\] key 'responses'.*different values"):
        batch.union(other, stage="reward")


def test_union_with_a_conflicting_non_tensor_raises():
    batch = make_batch(4)
    with pytest.raises(BatchContractError, match="'uid'"):
        batch.union(Batch(non_tensors={"uid": ["x", "u1", "u2", "u3"]}))


def test_union_with_a_different_batch_size_raises():
    with pytest.raises(BatchContractError, match=r"\[ref\] batch size mismatch: expected 4 rows, got 3"):
        make_batch(4).union(make_batch(3), stage="ref")


# ---- select --------------------------------------------------------------------------------------
def test_select_by_slice():
    out = make_batch(6).select(slice(1, 4))
    assert out["responses"][:, 0].tolist() == [1, 2, 3]
    assert list(out["uid"]) == ["u1", "u2", "u3"]
    assert out.meta == {"step": 7}


def test_select_by_index_list_keeps_the_given_order():
    out = make_batch(6).select([4, 0, 4])
    assert out["responses"][:, 0].tolist() == [4, 0, 4]
    assert list(out["uid"]) == ["u4", "u0", "u4"]


@pytest.mark.parametrize("as_tensor", [False, True], ids=["numpy", "torch"])
def test_select_by_boolean_mask(as_tensor):
    mask = np.array([True, False, False, True, True, False])
    out = make_batch(6).select(torch.from_numpy(mask) if as_tensor else mask)
    assert out["responses"][:, 0].tolist() == [0, 3, 4]
    assert list(out["uid"]) == ["u0", "u3", "u4"]
    assert out["ground_truth"][1] == [3, 3]


# ---- split / chunk / concat ----------------------------------------------------------------------
def test_split_gives_chunks_of_the_size_and_a_shorter_last_one():
    parts = make_batch(7).split(3)
    assert [len(p) for p in parts] == [3, 3, 1]
    assert list(parts[2]["uid"]) == ["u6"]


def test_split_then_concat_round_trips():
    batch = make_batch(7)
    assert_same_batch(Batch.concat(batch.split(3)), batch)


def test_chunk_then_concat_round_trips():
    batch = make_batch(8)
    parts = batch.chunk(4)
    assert [len(p) for p in parts] == [2, 2, 2, 2]
    assert_same_batch(Batch.concat(parts), batch)


def test_chunk_into_unequal_parts_raises():
    with pytest.raises(BatchContractError, match="batch of 7 rows does not split into 2 equal parts"):
        make_batch(7).chunk(2)


def test_concat_skips_empty_batches_and_of_none_is_empty():
    batch = make_batch(3)
    assert_same_batch(Batch.concat([Batch(), batch, Batch()]), batch)
    assert len(Batch.concat([])) == 0


def test_concat_with_different_key_sets_raises():
    other = make_batch(2)
    del other.tensors["advantages"]
    with pytest.raises(BatchContractError, match=r"\[concat\] key sets differ"):
        Batch.concat([make_batch(2), other])


# ---- repeat --------------------------------------------------------------------------------------
def test_repeat_interleaved_keeps_copies_of_a_row_adjacent():
    out = make_batch(3).repeat(2, interleave=True)
    assert list(out["uid"]) == ["u0", "u0", "u1", "u1", "u2", "u2"]
    assert out["responses"][:, 0].tolist() == [0, 0, 1, 1, 2, 2]
    assert out["advantages"].shape == (6, 3)
    assert out["ground_truth"][3] == [1, 1]


def test_repeat_not_interleaved_tiles_the_whole_batch():
    out = make_batch(3).repeat(2, interleave=False)
    assert list(out["uid"]) == ["u0", "u1", "u2", "u0", "u1", "u2"]
    assert out["responses"][:, 0].tolist() == [0, 1, 2, 0, 1, 2]
    assert out["advantages"].shape == (6, 3)


# ---- to ------------------------------------------------------------------------------------------
def test_to_moves_tensors_and_keeps_non_tensors_and_meta():
    batch = make_batch(2)
    out = batch.to("meta")
    assert all(v.device.type == "meta" for v in out.tensors.values())
    assert list(out["uid"]) == ["u0", "u1"]
    assert out.meta == {"step": 7}
    assert batch["responses"].device.type == "cpu"


# ---- the contract --------------------------------------------------------------------------------
def check_error(batch: Batch, stage: str, **kwargs) -> str:
    with pytest.raises(BatchContractError) as info:
        batch.check(stage, **kwargs)
    return str(info.value)


def test_check_returns_the_batch_when_it_holds():
    batch = make_batch(4)
    assert batch.check("rollout", expected_size=4) is batch


def test_check_names_stage_key_and_both_shapes_for_a_misaligned_response_key():
    batch = make_batch(4, t_resp=8)
    batch.tensors["advantages"] = torch.zeros(4, 7)
    message = check_error(batch, "advantage")
    assert message.startswith("[advantage]")
    assert "'advantages'" in message
    assert "(4, 8)" in message  # expected: like responses
    assert "(4, 7)" in message  # actual


def test_check_names_the_key_with_the_wrong_batch_size():
    batch = make_batch(4)
    batch.tensors["values"] = torch.zeros(3, 3)
    message = check_error(batch, "critic")
    assert message.startswith("[critic]")
    assert "'values'" in message
    assert "expected batch size 4" in message
    assert "(3, 3)" in message


def test_check_against_expected_size_names_the_first_key():
    message = check_error(make_batch(4), "rollout", expected_size=6)
    assert "[rollout] key 'responses': expected batch size 6" in message
    assert "(4, 3)" in message


def test_check_catches_a_non_tensor_of_the_wrong_length():
    batch = make_batch(4)
    batch.non_tensors["uid"] = np.array(["a", "b"], dtype=object)
    message = check_error(batch, "dataset")
    assert "[dataset] key 'uid'" in message
    assert "expected batch size 4" in message and "(2,)" in message


def test_check_rejects_float_responses():
    batch = make_batch(4)
    batch.tensors["responses"] = batch["responses"].float()
    message = check_error(batch, "rollout")
    assert message.startswith("[rollout]")
    assert "'responses'" in message and "integer" in message and "torch.float32" in message


def test_check_rejects_integer_advantages():
    batch = make_batch(4)
    batch.tensors["advantages"] = torch.zeros(4, 3, dtype=torch.long)
    message = check_error(batch, "advantage")
    assert message.startswith("[advantage]")
    assert "'advantages'" in message and "floating" in message and "torch.int64" in message


def test_check_accepts_a_bool_response_mask():
    batch = make_batch(4)
    batch.tensors["response_mask"] = batch["response_mask"].bool()
    batch.check("rollout")


def test_check_raises_one_error_even_when_several_keys_are_wrong():
    # The first problem found is reported; the message names one key, not a list.
    batch = make_batch(4, t_resp=8)
    batch.tensors["advantages"] = torch.zeros(4, 7)
    batch.tensors["values"] = torch.zeros(4, 6)
    message = check_error(batch, "critic")
    assert message.count("key '") == 1
