"""Chat templates of the families layertap-prep is checked on, each written once with
``{% generation %}...{% endgeneration %}`` around exactly what the assistant generates: its
content, the reasoning and tool calls the rendering keeps, and the end-of-turn token, never the
role header, and never what the generation prompt holds (Qwen3 without thinking prompts with an
empty think block; Kimi-K2.5 prompts with ``<think>``). ``plain(t)`` is the template as a model
ships it: the same text without the tags, which render nothing.

Each raises on one thing (``raise_exception``), so the tests can count a refusal for it."""

import re

_TAGS = re.compile(r"\{%-?\s*(?:end)?generation\s*-?%\}")


def plain(template: str) -> str:
    return _TAGS.sub("", template)


# ChatML as SmolLM2-135M-Instruct ships it (the tests take the shipped text from the GGUF and
# check that it renders as this one does): a default system prompt when the conversation has
# none. Its own way to fail: an assistant turn without content ("content": null) cannot be
# concatenated.
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
CHATML_SMOLLM2 = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\n" + SMOLLM2_SYSTEM + "<|im_end|>\\n' }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Llama-3 layout: headers between <|start_header_id|> and <|end_header_id|>, contents trimmed,
# <|eot_id|> after each; tool results under "ipython", tool calls as JSON.
_LLAMA3_MESSAGES = (
    "{% for m in msgs %}"
    "{% if m['role'] == 'system' %}{{ raise_exception('a system message must come first') }}{% endif %}"
    "{% set c = m['content'] if m['content'] is string else '' %}"
    "{% if m['role'] == 'assistant' %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% generation %}{{ c | trim }}"
    "{% for tc in m['tool_calls'] or [] %}"
    "{{ '{\"name\": \"' + tc['function']['name'] + '\", \"parameters\": ' + tc['function']['arguments'] | tojson + '}' }}"
    "{% endfor %}{{ '<|eot_id|>' }}{% endgeneration %}"
    "{% else %}{% set role = 'ipython' if m['role'] == 'tool' else m['role'] %}"
    "{{ '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + c | trim + '<|eot_id|>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
LLAMA3 = (
    "{{ '<|begin_of_text|>' }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{{ '<|start_header_id|>system<|end_header_id|>\\n\\n' + messages[0]['content'] | trim + '<|eot_id|>' }}"
    "{% set msgs = messages[1:] %}{% else %}{% set msgs = messages %}{% endif %}" + _LLAMA3_MESSAGES)

# Llama-3.1 style: the template always writes a system block of its own (dates), and puts the
# conversation's system message, if any, inside it.
LLAMA31_SYSTEM = "Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n"
LLAMA31 = (
    "{{ '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n\\n" + LLAMA31_SYSTEM + "' }}"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] | trim }}"
    "{% set msgs = messages[1:] %}{% else %}{% set msgs = messages %}{% endif %}{{ '<|eot_id|>' }}"
    + _LLAMA3_MESSAGES)

# Qwen3 style: reasoning (a "reasoning_content" field, or <think>...</think> at the start of the
# content) is kept only for the assistant turns after the last user message, and a think block is
# always written for the final turn; tool calls in <tool_call> tags; consecutive tool results in
# one user turn; tool definitions in the system block; enable_thinking=false prompts with an
# empty think block.
QWEN3 = (
    "{%- macro tail(m, c) -%}{{- c -}}"
    "{%- for tc in m['tool_calls'] or [] -%}"
    "{%- if not loop.first or c -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + tc['function']['name'] + '\", \"arguments\": ' + tc['function']['arguments'] | tojson + '}\\n</tool_call>' -}}"
    "{%- endfor -%}{{- '<|im_end|>' -}}{%- endmacro -%}"
    "{%- set off = enable_thinking is defined and enable_thinking is false -%}"
    "{%- if tools -%}{{- '<|im_start|>system\\n' -}}"
    "{%- if messages[0]['role'] == 'system' -%}{{- messages[0]['content'] + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n<tools>' -}}{%- for t in tools -%}{{- '\\n' + t | tojson -}}{%- endfor -%}"
    "{{- '\\n</tools><|im_end|>\\n' -}}"
    "{%- elif messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- set ns = namespace(last_query=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_query = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- set c = m['content'] if m['content'] is string else '' -%}"
    "{%- if m['role'] == 'user' or (m['role'] == 'system' and not loop.first) -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + c + '<|im_end|>\\n' -}}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{%- set r = m['reasoning_content'] if m['reasoning_content'] is string else '' -%}"
    "{%- if not r and '</think>' in c -%}"
    "{%- set r = c.split('</think>')[0].split('<think>')[-1] -%}"
    "{%- set c = c.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}"
    "{%- set r = r.strip('\\n') -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if loop.index0 > ns.last_query and (loop.last or r) -%}"
    "{%- if off and not r -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- generation -%}{{- tail(m, c) -}}{%- endgeneration -%}"
    "{%- elif off -%}{{- '<think>\\n' -}}"
    "{%- generation -%}{{- r + '\\n</think>\\n\\n' + tail(m, c) -}}{%- endgeneration -%}"
    "{%- else -%}"
    "{%- generation -%}{{- '<think>\\n' + r + '\\n</think>\\n\\n' + tail(m, c) -}}{%- endgeneration -%}"
    "{%- endif -%}"
    "{%- else -%}{%- generation -%}{{- tail(m, c) -}}{%- endgeneration -%}{%- endif -%}"
    "{{- '\\n' -}}"
    "{%- elif m['role'] == 'tool' -%}"
    "{%- if loop.first -%}{{- raise_exception('a tool result cannot open the conversation') -}}{%- endif -%}"
    "{%- if messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + c + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if off -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}")

# Kimi-K2.5 style: <|im_system|>/<|im_user|>/<|im_assistant|> role tags with <|im_middle|>, a
# default system prompt, reasoning in <think>...</think> kept for the turns after the last user
# message (earlier turns render an empty one), tool calls in Kimi's sections, tool results as
# "## Return of <id>", tool definitions in a tool_declare block. The generation prompt ends in
# <think> (thinking) or <think></think> (thinking=false).
KIMI = (
    "{%- macro tail(m, c) -%}{{- c -}}"
    "{%- if m['tool_calls'] -%}{{- '<|tool_calls_section_begin|>' -}}"
    "{%- for tc in m['tool_calls'] -%}"
    "{{- '<|tool_call_begin|>' + tc['id'] + '<|tool_call_argument_begin|>' + tc['function']['arguments'] | tojson + '<|tool_call_end|>' -}}"
    "{%- endfor -%}{{- '<|tool_calls_section_end|>' -}}{%- endif -%}"
    "{{- '<|im_end|>' -}}{%- endmacro -%}"
    "{%- set off = thinking is defined and thinking is false -%}"
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if tools -%}{{- '<|im_system|>tool_declare<|im_middle|>' + tools | tojson + '<|im_end|>' -}}{%- endif -%}"
    "{%- if messages[0]['role'] != 'system' -%}"
    "{{- '<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- set c = m['content'] if m['content'] is string else '' -%}"
    "{%- if m['role'] == 'system' -%}{{- '<|im_system|>system<|im_middle|>' + c + '<|im_end|>' -}}"
    "{%- elif m['role'] == 'user' -%}{{- '<|im_user|>user<|im_middle|>' + c + '<|im_end|>' -}}"
    "{%- elif m['role'] == 'tool' -%}"
    "{%- if not m['tool_call_id'] -%}{{- raise_exception('a tool result needs its tool_call_id') -}}{%- endif -%}"
    "{{- '<|im_system|>tool<|im_middle|>## Return of ' + m['tool_call_id'] + '\\n' + c + '<|im_end|>' -}}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{%- set r = m['reasoning_content'] if m['reasoning_content'] is string and loop.index0 > ns.last_user else '' -%}"
    "{{- '<|im_assistant|>assistant<|im_middle|><think>' -}}"
    "{%- if off and not r -%}{{- '</think>' -}}{%- generation -%}{{- tail(m, c) -}}{%- endgeneration -%}"
    "{%- else -%}{%- generation -%}{{- r + '</think>' + tail(m, c) -}}{%- endgeneration -%}{%- endif -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}"
    "{%- if off -%}{{- '<think></think>' -}}{%- else -%}{{- '<think>' -}}{%- endif -%}{%- endif -%}")
