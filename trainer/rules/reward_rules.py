"""The rule rewards, torch-free: the trainers score with them (`trainer.rl.rewards` builds its reward
functions on these) and the dashboard scores stored responses again with the very same code
(`mmcore.runs.rescore`)."""
import re

#: The most `format_reward` gives: 0.5 for the full pattern plus 0.25 for each of the four tags.
FORMAT_MAX = 1.5

# A complete reasoning response: think block, then answer block (one blank line between is tolerated).
_FORMAT_PATTERNS = (
    re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.S),
    re.compile(r"^<think>\n.*?\n</think>\n\n<answer>\n.*?\n</answer>$", re.S),
)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_CHATML_TURN = re.compile(r"<\|im_start\|>(system|user|assistant)\s+(.*?)<\|im_end\|>", re.S)


def format_reward(response):
    """Reasoning format reward: 0.5 for a full think/answer match, plus 0.25 per tag present exactly once."""
    full = 0.5 if any(p.match(response) for p in _FORMAT_PATTERNS) else 0.0
    return full + 0.25 * sum(response.count(tag) == 1 for tag in _TAGS)


def extract_answer(text, reasoning):
    """The answer part of a response: the `<answer>` content with reasoning (None without one), else the text."""
    if not reasoning:
        return text.strip()
    match = _ANSWER.search(text)
    return match.group(1).strip() if match else None


def prompt_messages(prompt):
    """Turn a ChatML prompt back into chat messages (the open assistant turn at the end is left out)."""
    return [{"role": role, "content": content.strip()} for role, content in _CHATML_TURN.findall(prompt)]


def _normalise(text):
    return " ".join(text.split())


def rule_reward(response, reference, reasoning):
    """1.0 when the response's answer equals the reference answer (whitespace-insensitive), else 0.0.

    A reference written in the reasoning format (`<answer>...</answer>`) is compared by its answer content.
    """
    answer = extract_answer(response, reasoning)
    if answer is None:
        return 0.0
    ref_answer = extract_answer(reference, True) if _ANSWER.search(reference) else reference.strip()
    return 1.0 if _normalise(answer) == _normalise(ref_answer) else 0.0
