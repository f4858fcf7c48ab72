"""Hand-checked MATH / AIME scorer examples: math_verify on the last boxed answer."""

import threading

import pytest

from core.reward.manager import DEFAULT_SCORERS
from core.reward.mathverify import compute_score, final_answer, last_boxed


@pytest.mark.parametrize("ground_truth", ["0.5", r"\frac{1}{2}", r"\frac12", "1/2"])
def test_a_half_in_any_notation_is_correct(ground_truth):
    assert compute_score(r"so \boxed{\frac12}", ground_truth) == 1.0


def test_dfrac_is_a_frac():
    assert compute_score(r"$\boxed{\dfrac{1}{2}}$", "0.5") == 1.0


def test_integer_answers():
    assert compute_score(r"The answer is \boxed{25}.", "25") == 1.0
    assert compute_score(r"The answer is \boxed{25}.", "26") == 0.0
    assert compute_score(r"\boxed{25}", 25) == 1.0  # a JSONL ground truth may be an int


def test_negative_numbers_keep_their_sign():
    assert compute_score(r"\boxed{-3}", "-3") == 1.0
    assert compute_score(r"\boxed{-3}", "3") == 0.0
    assert compute_score(r"\boxed{3}", "-3") == 0.0


def test_thousands_separator_is_ignored_both_ways():
    assert compute_score(r"\boxed{1,000}", "1000") == 1.0
    assert compute_score(r"\boxed{1000}", "1,000") == 1.0


def test_boxed_ground_truth_is_unwrapped():
    assert compute_score(r"\boxed{7}", r"\boxed{7}") == 1.0
    assert compute_score(r"\boxed{7}", "$7$") == 1.0


def test_only_the_last_box_counts():
    # math_verify alone would read both boxes as the set {3, 5} and match neither.
    text = r"First try: \boxed{3}. Wait, that is wrong. \boxed{5}"
    assert compute_score(text, "5") == 1.0
    assert compute_score(text, "3") == 0.0


def test_nested_braces_in_the_box():
    assert last_boxed(r"\boxed{\frac{\sqrt{2}}{2}} done") == r"\frac{\sqrt{2}}{2}"
    assert compute_score(r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt2}") == 1.0


def test_plain_text_answer_without_a_box_is_read():
    # Pinned choice: with no \boxed, math_verify reads the whole text (the last expression, an
    # "answer is" one first), as verl's math_verify scorer does; a boxed-format reward is separate.
    assert compute_score("so the answer is 204", "204") == 1.0
    assert compute_score("I tried 204, then 3, and finally 7", "204") == 0.0  # the last number is 7


def test_an_unclosed_last_box_scores_zero():
    # The response was cut off inside its final answer: unfinished, even if an earlier box was right.
    assert final_answer(r"\boxed{5} hmm, no: \boxed{\frac{1") is None
    assert compute_score(r"\boxed{5} hmm, no: \boxed{\frac{1", "5") == 0.0


@pytest.mark.parametrize("response", ["", "I do not know.", r"\boxed{}", r"\boxed{\text{}}"])
def test_no_answer_scores_zero(response):
    assert compute_score(response, "5") == 0.0


@pytest.mark.parametrize("response", [r"\boxed{\frac{}{}}}\\\left(", r"\boxed{\sqrt{}}", r"\boxed{\left(}",
                                      r"\boxed{^^__\\}", "\\boxed{\x00\ufffd}"])
def test_garbage_latex_scores_zero_without_raising(response):
    assert compute_score(response, "5") == 0.0


def test_works_off_the_main_thread():
    # math_verify's own timeout uses signal.alarm, which raises off the main thread; the scorer
    # must switch it off there instead (the pool manager enforces the time limit).
    results = []
    thread = threading.Thread(target=lambda: results.append(compute_score(r"\boxed{\frac12}", "0.5")))
    thread.start()
    thread.join()
    assert results == [1.0]


@pytest.mark.parametrize("source", ["HuggingFaceH4/MATH-500", "math500", "lighteval/MATH",
                                    "DigitalLearningGmbH/MATH-lighteval", "aime24", "aime25", "amc23"])
def test_math_data_sources_use_this_scorer(source):
    assert DEFAULT_SCORERS[source] is compute_score
