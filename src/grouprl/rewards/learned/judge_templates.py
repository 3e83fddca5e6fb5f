"""The judges' rubric templates (``judge.py``): the default pointwise one (a ``SCORE: <0-10>`` line) and
the default group one (one ``<n>: <score>`` line per response), and how the ``template`` option is loaded
(the template text itself or a file holding it) into a strict Jinja template.
"""

from __future__ import annotations

from pathlib import Path

from grouprl.config import ConfigError

POINTWISE_TEMPLATE = """Grade the response to the question below on a scale from 0 (useless or wrong) to 10 \
(correct, complete and clear).

Question:
{{ question }}

Response:
{{ completion }}
{% if reference is not none %}
Reference answer (the response is correct only if it agrees with it):
{{ reference }}
{% endif %}
Explain briefly, then end with a line of the form SCORE: <0-10>."""

GROUP_TEMPLATE = """Here are {{ k }} responses to the same question. Score each from 0 (useless or wrong) to 10 \
(correct, complete and clear), comparing them with each other: better responses get higher scores.

Question:
{{ question }}
{% if reference is not none %}
Reference answer:
{{ reference }}
{% endif %}
{% for c in completions %}
Response {{ loop.index }}:
{{ c }}
{% endfor %}
Reply with exactly {{ k }} lines, one per response, of the form <response number>: <score>."""


def load_template(name: str, template: str | None, default: str):
    import jinja2

    text = template or default
    if template and len(template) < 300 and "\n" not in template and Path(template).is_file():
        text = Path(template).read_text()
    try:
        return jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True).from_string(text)
    except jinja2.TemplateSyntaxError as err:
        raise ConfigError(f"reward '{name}': template line {err.lineno}: {err.message}") from None
