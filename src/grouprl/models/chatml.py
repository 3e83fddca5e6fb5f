"""The ChatML specials and template that the tiny tokenizers (character and word level) share."""

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen-style ChatML, so prompts look like the real model's.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
