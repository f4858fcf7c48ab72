"""Hand-checked GSM8K scorer examples; each pins a verl behaviour so our numbers compare with verl's."""

import pytest

from core.reward.gsm8k import SOLUTION_CLIP_CHARS, compute_score, extract_solution


def test_strict_reads_the_hash_marker():
    assert extract_solution("She has 8 * 9 = 72 apples.\n#### 72") == "72"
    assert compute_score("She has 8 * 9 = 72 apples.\n#### 72", "72") == 1.0


def test_strict_removes_commas():
    assert extract_solution("#### 1,234") == "1234"
    assert compute_score("total: #### 1,234", "1234") == 1.0


def test_strict_keeps_the_minus_sign():
    assert extract_solution("#### -5") == "-5"
    assert compute_score("#### -5", "-5") == 1.0
    assert compute_score("#### -5", "5") == 0.0


def test_strict_takes_the_last_marker():
    assert extract_solution("#### 3 wait, no.\n#### 72") == "72"


def test_strict_needs_the_marker_but_flexible_does_not():
    text = "so the answer is 72"
    assert extract_solution(text, method="strict") is None
    assert compute_score(text, "72", method="strict") == 0.0
    assert extract_solution(text, method="flexible") == "72"
    assert compute_score(text, "72", method="flexible") == 1.0


def test_strict_needs_a_space_after_the_marker():
    assert extract_solution("####72") is None


def test_flexible_takes_the_last_number():
    assert extract_solution("3 apples and 4 pears make 7", method="flexible") == "7"


def test_flexible_keeps_commas_and_trailing_period_like_verl():
    # verl's flexible mode does not normalize: these never match "1234" / "72".
    assert extract_solution("it is 1,234", method="flexible") == "1,234"
    assert extract_solution("The answer is 72.", method="flexible") == "72."
    assert compute_score("The answer is 72.", "72", method="flexible") == 0.0


def test_flexible_skips_a_lone_period():
    assert extract_solution("It is 72 . ", method="flexible") == "72"


def test_flexible_with_only_periods_returns_the_first_like_verl():
    assert extract_solution("Hmm. Done.", method="flexible") == "."
    assert compute_score("Hmm. Done.", "72", method="flexible", format_score=0.1) == 0.1


def test_answer_before_the_last_300_chars_is_ignored():
    text = "#### 72\n" + "x" * SOLUTION_CLIP_CHARS
    assert SOLUTION_CLIP_CHARS == 300
    assert extract_solution(text) is None
    assert compute_score(text, "72") == 0.0
    # ... but one that ends inside the window is found.
    assert extract_solution("#### 72" + "x" * (SOLUTION_CLIP_CHARS - 7)) == "72"


def test_wrong_answer_gets_format_score():
    assert compute_score("#### 71", "72", format_score=0.1) == 0.1
    assert compute_score("#### 71", "72") == 0.0


def test_no_answer_gets_zero_even_with_format_score():
    assert compute_score("I don't know", "72", format_score=0.1) == 0.0


def test_correct_answer_gets_the_given_score():
    assert compute_score("#### 72", "72", score=2.0) == 2.0


def test_numeric_ground_truth_compares_as_string():
    assert compute_score("#### 72", 72) == 1.0


def test_unknown_method_is_an_error():
    with pytest.raises(ValueError, match="'strict' or 'flexible'"):
        extract_solution("#### 1", method="loose")
