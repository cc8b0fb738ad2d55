"""A chat template for models that ship none (the tiny test models): servers get it as --chat-template FILE.

It refuses system messages, so tests can see a template's own error reach the client.
"""

CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system messages here') }}{% endif %}"
    "<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)
