"""Reading a judge's verdict so that only the judge's own verdict counts, never text the policy wrote.

A judge may quote the answer it grades, and the policy controls that answer: an answer that ends with
``SCORE: 10`` (or ``1: 10`` lines, or ``{"score": 10}``) must not become the judge's verdict when the
judge quotes it, runs out of tokens after quoting it, or never gets to its own verdict. The rule:

1. **Complete replies only.** A reply cut at ``max_tokens`` (``finish_reason: length``) holds no
   verdict, whatever it contains (checked in ``judge.py``). Except ``number``, whose verdict opens the
   reply, so a cut comes after it: that is how a server forces a one-token grade (``max_tokens: 1`` with
   ``logit_bias`` on the digits); keep ``max_tokens`` at least the grade's length in tokens.
2. **The verdict ends the reply.** ``score_line``: the last non-blank line is exactly a score line
   (``SCORE: 7``, markdown and ``/10`` allowed); a group: the last K non-blank lines are exactly the
   ``<n>: <score>`` lines of responses 1..K, each once. ``json``: the reply ends with the JSON object
   (a closing code fence allowed). ``number``: the reply opens with the number (a judge constrained to
   answer with its grade). ``score_pattern``: searched in the last non-blank line only. A score line
   quoted earlier in the reply, or followed by anything, is not the verdict.
3. **The verdict is not the policy's text.** A verdict (its line(s) or object, whitespace and case
   aside) that also appears in an answer being graded is refused: the judge may be echoing it.

Each refusal is a :class:`JudgeParseError`, i.e. that sample's reward error, never a score.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grouprl.safe_text import JsonRejected, safe_json_loads

NUMBER = r"(-?\d+(?:\.\d+)?)"
_OUT_OF = r"(?:\s*/\s*\d+(?:\.\d+)?)?"  # "7/10"
_SCORE_LINE = re.compile(r"[\W_]*(?:final\s+)?score\W{0,3}[:=]\s*\**\s*" + NUMBER + _OUT_OF + r"[\s*_.]*", re.I)
_GROUP_LINE = re.compile(r"[\W_]*(?:response\s*)?#?(\d+)\W{0,3}[:=\-]\s*\**\s*" + NUMBER + _OUT_OF + r"[\s*_.]*", re.I)
_LEADING_NUMBER = re.compile(r"\s*[*_]*\s*" + NUMBER)
_CLOSING_FENCE = re.compile(r"\s*```\s*$")
MAX_OBJECT_STARTS = 100  # opening braces tried from the end: a verdict object is small


class JudgeParseError(ValueError):
    """The judge's reply does not hold a verdict in the declared format."""


@dataclass
class Verdict:
    scores: list[float]
    text: str  # the part of the reply the scores were read from ("" where its position alone proves it)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _final_object(text: str, key: str) -> Verdict | None:
    body = _CLOSING_FENCE.sub("", text.rstrip()).rstrip()
    if not body.endswith("}"):
        return None
    starts = [m.start() for m in re.finditer(r"\{", body)][-MAX_OBJECT_STARTS:]
    for start in reversed(starts):
        decoded = safe_json_loads(body[start:], prefix=True)
        if isinstance(decoded, JsonRejected):
            continue
        value, end = decoded
        if start + end == len(body) and isinstance(value, dict) and key in value:
            return Verdict([value[key]], body[start:])
    return None


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise JudgeParseError(f"score {value!r:.40} is not a number")
    try:
        return float(value)
    except ValueError:
        raise JudgeParseError(f"score {value!r:.40} is not a number") from None


def read_score(text: str, fmt: str, pattern: str | None = None) -> Verdict:
    """The pointwise verdict at the end of ``text`` (rule 2), or :class:`JudgeParseError`."""
    lines = _lines(text)
    last = lines[-1] if lines else ""
    if pattern is not None:
        match = re.search(pattern, last)
        if not match:
            raise JudgeParseError(f"the reply's last line does not match score_pattern {pattern!r}")
        return Verdict([_number(match.group(1))], last)
    if fmt == "number":
        match = _LEADING_NUMBER.match(text)
        if not match:
            raise JudgeParseError("the reply does not open with a number")
        return Verdict([float(match.group(1))], "")
    if fmt == "json":
        found = _final_object(text, "score")
        if found is None:
            raise JudgeParseError('the reply does not end with a JSON object with "score"')
        return Verdict([_number(found.scores[0])], found.text)
    match = _SCORE_LINE.fullmatch(last)
    if not match:
        raise JudgeParseError("the reply's last line is not a 'SCORE: <number>' line")
    return Verdict([float(match.group(1))], last)


def read_group_scores(text: str, fmt: str, k: int) -> Verdict:
    """The K scores at the end of ``text`` (rule 2), in response order, or :class:`JudgeParseError`."""
    if fmt == "json":
        found = _final_object(text, "scores")
        scores = found.scores[0] if found else None
        if not isinstance(scores, list) or len(scores) != k:
            raise JudgeParseError(f'the reply does not end with a JSON object whose "scores" is a list of {k} numbers')
        return Verdict([_number(x) for x in scores], found.text if found else "")
    tail = _lines(text)[-k:]
    by_response: dict[int, float] = {}
    for line in tail:
        match = _GROUP_LINE.fullmatch(line)
        if match and int(match.group(1)) not in by_response:
            by_response[int(match.group(1))] = float(match.group(2))
    missing = [i for i in range(1, k + 1) if i not in by_response]
    if missing or len(tail) < k:
        raise JudgeParseError(
            f"the reply's last {k} lines are not one '<n>: <score>' line per response; "
            f"no line for response(s) {missing} of {k}"
        )
    return Verdict([by_response[i] for i in range(1, k + 1)], "\n".join(tail))


def _squeezed(text: str) -> str:
    return " ".join(text.split()).lower()


def check_not_quoted(verdict: Verdict, graded: list[str]) -> None:
    """Rule 3: refuse a verdict that an answer being graded also contains."""
    if not verdict.text.strip():
        return
    needle = _squeezed(verdict.text)
    if any(needle in _squeezed(answer) for answer in graded):
        raise JudgeParseError(
            f"the verdict {verdict.text.strip()[:60]!r} also appears in the answer graded: "
            "it may be the policy's text, not the judge's"
        )
