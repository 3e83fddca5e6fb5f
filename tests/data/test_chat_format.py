"""A chat template that cannot render a conversation is refused before any model loads, in one line,
exit 2, naming the file or saying it is the inline template: a Jinja syntax error, an unknown filter,
an undefined name, an error raised while rendering, a template that drops the messages, a file that is
not UTF-8 text, a folder, a missing file. A template that refuses only a system turn is accepted."""

from __future__ import annotations

import pytest

from grouprl.config import ConfigError
from grouprl.data.chat_format import check_chat_template
from grouprl.job.run_dir import LOCK
from run_helpers import train

GOOD = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}<|assistant|>"
NO_SYSTEM = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" + GOOD
)
BAD = {
    "syntax": ("{% for m in messages %}{{ m['content'] }}", "TemplateSyntaxError"),
    "filter": ("{{ messages | shout }}", "No filter named 'shout'"),
    "undefined": ("{{ conversation[0].content }}", "'conversation' is undefined"),
    "raises": ("{{ raise_exception('bad template') }}", "bad template"),
    "division": ("{{ messages | length / 0 }}", "ZeroDivisionError"),
    "drops_messages": ("{% for m in messages %}{{ m['role'] }}{% endfor %}", "the last user message is not in"),
}


@pytest.mark.parametrize("how", ["inline", "file"])
@pytest.mark.parametrize("name", sorted(BAD))
def test_a_template_that_cannot_render_is_refused(name, how, tmp_path):
    text, why = BAD[name]
    value = text
    if how == "file":
        value = str(tmp_path / "template.jinja")
        (tmp_path / "template.jinja").write_text(text)
    with pytest.raises(ConfigError) as err:
        check_chat_template(value)
    message = str(err.value)
    assert why in message and "\n" not in message
    assert (value in message) if how == "file" else ("the inline template" in message)


def test_a_template_file_that_is_not_text(tmp_path):
    path = tmp_path / "template.jinja"
    path.write_bytes(GOOD.encode() + b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"template.jinja is not UTF-8 text \(byte 0xff at offset"):
        check_chat_template(str(path))
    with pytest.raises(ConfigError, match="neither a Jinja template nor an existing file"):
        check_chat_template(str(tmp_path))  # a folder
    with pytest.raises(ConfigError, match="neither a Jinja template nor an existing file"):
        check_chat_template(str(tmp_path / "missing.jinja"))


def test_good_templates_pass():
    check_chat_template(GOOD)
    check_chat_template(NO_SYSTEM)  # refusing a system turn is a template's right
    check_chat_template(
        "{{ messages[-1]['content'] }}{% if enable_thinking %}<think>{% endif %}", {"enable_thinking": False}
    )


def test_train_refuses_before_any_model_loads(tiny_arithmetic_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(tiny_arithmetic_dir, out, "--chat_template", BAD["undefined"][0]) == 2
    printed = capsys.readouterr().err
    assert printed.strip().count("\n") == 0 and "grouprl: error: config key 'chat_template'" in printed, printed
    assert sorted(p.name for p in out.iterdir()) == [LOCK]  # nothing written, no model loaded
