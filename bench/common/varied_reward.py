"""A reward for timing runs on random-init models: it varies between samples (a hash of the text), so
GRPO's advantages and gradients are non-zero and every update really changes the weights the rollout
engine must receive. It measures nothing about quality."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    return (sum(map(ord, solution_str)) % 7) / 6
