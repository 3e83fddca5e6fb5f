"""The process that runs math-verify for ``math_judge.py`` (one request per stdin line, one JSON
answer per stdout line). It runs in its own main thread, so math-verify's own ``signal.alarm``
limits work here; what they cannot stop (sympy computing in C while holding the GIL, e.g.
``\\boxed{9^{9^{9}}}``) the parent stops by killing this process."""

from __future__ import annotations

import json
import re
import sys


def _answer_config():
    from math_verify import ExprExtractionConfig, LatexExtractionConfig
    from math_verify.parser import NormalizationConfig

    # open-r1's accuracy_reward config (boxed answers first, LaTeX needs $..$/\[..\]/\boxed
    # anchors), plus plain expressions so "the answer is 0.5" also parses.
    return [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(
                nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True
            ),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        ),
        ExprExtractionConfig(),
    ]


def parse_gold(gold: str, timeout: int) -> list:
    """A GSM8K-style ``... #### 72`` keeps what follows ``####``; a bare LaTeX gold such as
    ``\\sqrt{2}`` (a backslash, ``^``, ``_`` or braces) that fails as is is retried as ``$\\sqrt{2}$``."""
    from math_verify import parse

    gold = gold.strip()
    if "####" in gold:
        gold = gold.rsplit("####", 1)[1].strip()
    if not gold:
        return []
    parsed = parse(gold, extraction_mode="first_match", parsing_timeout=timeout)
    if not parsed and "$" not in gold and re.search(r"[\\^_{}]", gold):
        parsed = parse(f"${gold}$", extraction_mode="first_match", parsing_timeout=timeout)
    return parsed


def judge(request: dict) -> dict:
    from math_verify import parse, verify

    timeout = int(request.get("timeout", 5))
    gold = parse_gold(str(request["gold"]), timeout)
    if not gold:
        return {"gold": None, "answer": None, "correct": False}
    out = {"gold": str(gold[-1])[:200], "answer": None, "correct": False}
    completion = request.get("completion")
    if completion is None or not completion.strip():
        return out
    answer = parse(
        completion, extraction_config=_answer_config(), extraction_mode="first_match", parsing_timeout=timeout
    )
    if answer:
        out["answer"] = str(answer[-1])[:200]
        out["correct"] = bool(verify(gold, answer, timeout_seconds=timeout))
    return out


def main() -> None:
    import math_verify  # noqa: F401 - loaded before "ready", so a request's budget excludes the import

    sys.set_int_max_str_digits(0)  # a long integer is a value to compare, not an error
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            out = judge(json.loads(line))
        except Exception as err:  # noqa: BLE001 - math-verify's own failures: that answer is not correct
            out = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
