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

# The five below are written from the published formats (tokenizer_config.json /
# chat_template.jinja of each model), not copied: the rendered text is meant to be the same,
# with the long instruction prose of tool prompts shortened.

# Mixtral-8x7B-Instruct (Mistral's v1 tokenizer: [INST] and [/INST] are text): BOS once, the
# system message folded into the first user turn, no generation prompt, " " + content + </s>
# for the assistant. Its own way to fail: a role other than user and assistant after the system
# message; turns that do not alternate are refused too (REFUSED in the tests).
MIXTRAL = (
    "{%- if messages[0]['role'] == 'system' -%}{%- set sys = messages[0]['content'] -%}"
    "{%- set msgs = messages[1:] -%}{%- else -%}{%- set msgs = messages -%}{%- endif -%}"
    "{{- bos_token -}}"
    "{%- for m in msgs -%}"
    "{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{- raise_exception('roles must alternate user/assistant after an optional system message') -}}"
    "{%- endif -%}"
    "{%- if m['role'] == 'user' -%}"
    "{{- ' [INST] ' + (sys + '\\n\\n' if loop.first and sys is defined else '') + m['content'] + ' [/INST]' -}}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{%- generation -%}{{- ' ' + m['content'] + eos_token -}}{%- endgeneration -%}"
    "{%- else -%}{{- raise_exception('only user and assistant roles after an optional system message') -}}"
    "{%- endif -%}{%- endfor -%}")

# Gemma-3: BOS, the system message folded into the first user turn, the assistant named "model",
# contents trimmed, <end_of_turn> (generation_config's EOS, not the tokenizer's) and a newline
# after each turn. Its own way to fail: turns that do not alternate user/assistant.
GEMMA3 = (
    "{{- bos_token -}}"
    "{%- if messages[0]['role'] == 'system' -%}{%- set prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set msgs = messages[1:] -%}{%- else -%}{%- set prefix = '' -%}{%- set msgs = messages -%}{%- endif -%}"
    "{%- for m in msgs -%}"
    "{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}"
    "{%- endif -%}"
    "{%- if m['role'] == 'assistant' -%}{{- '<start_of_turn>model\\n' -}}"
    "{%- generation -%}{{- m['content'] | trim + '<end_of_turn>' -}}{%- endgeneration -%}{{- '\\n' -}}"
    "{%- else -%}{{- '<start_of_turn>' + m['role'] + '\\n' + (prefix if loop.first else '') + m['content'] | trim"
    " + '<end_of_turn>\\n' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}")

# Llama-4: headers between <|header_start|> and <|header_end|>, <|eot|> after each message,
# contents as given (only the system message trimmed); tool definitions in the first user turn;
# a tool call turn is <|python_start|>content<|python_end|> then the calls as JSON; tool results
# under "ipython", through tojson (a string is iterable, so it is quoted). Its own way to fail:
# a tool call not wrapped in "function".
LLAMA4 = (
    "{{- bos_token -}}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{- '<|header_start|>system<|header_end|>\\n\\n' -}}"
    "{%- if tools -%}{{- 'Environment: ipython\\n' -}}{%- endif -%}"
    "{{- messages[0]['content'] | trim + '<|eot|>' -}}{%- set msgs = messages[1:] -%}"
    "{%- else -%}{%- set msgs = messages -%}{%- endif -%}"
    "{%- if tools -%}"
    "{{- '<|header_start|>user<|header_end|>\\n\\nAnswer with a JSON function call '"
    " + '{\"name\": function name, \"parameters\": its arguments} for these functions.\\n\\n' -}}"
    "{%- for t in tools -%}{{- t | tojson(indent=4) + '\\n\\n' -}}{%- endfor -%}"
    "{{- msgs[0]['content'] | trim + '<|eot|>' -}}{%- set msgs = msgs[1:] -%}"
    "{%- endif -%}"
    "{%- for m in msgs -%}"
    "{%- if not (m['role'] == 'tool' or 'tool_calls' in m) -%}"
    "{{- '<|header_start|>' + m['role'] + '<|header_end|>\\n\\n' -}}"
    "{%- if m['role'] == 'assistant' -%}{%- generation -%}"
    "{%- if m['content'] is string -%}{{- m['content'] -}}"
    "{%- else -%}{%- for p in m['content'] -%}{{- p['text'] -}}{%- endfor -%}{%- endif -%}"
    "{{- '<|eot|>' -}}{%- endgeneration -%}"
    "{%- else -%}"
    "{%- if m['content'] is string -%}{{- m['content'] -}}"
    "{%- else -%}{%- for p in m['content'] -%}{{- p['text'] -}}{%- endfor -%}{%- endif -%}"
    "{{- '<|eot|>' -}}{%- endif -%}"
    "{%- elif 'tool_calls' in m and m['tool_calls'] | length > 0 -%}"
    "{{- '<|header_start|>assistant<|header_end|>\\n\\n' -}}{%- generation -%}"
    "{{- '<|python_start|>' -}}{%- if m['content'] is string -%}{{- m['content'] -}}"
    "{%- else -%}{%- for p in m['content'] -%}{{- p['text'] -}}{%- endfor -%}{%- endif -%}{{- '<|python_end|>' -}}"
    "{%- for tc in m['tool_calls'] -%}"
    "{{- '{\"name\": \"' + tc['function']['name'] + '\", \"parameters\": ' + tc['function']['arguments'] | tojson + '}' -}}"
    "{%- endfor -%}{{- '<|eot|>' -}}{%- endgeneration -%}"
    "{%- elif m['role'] == 'tool' -%}{{- '<|header_start|>ipython<|header_end|>\\n\\n' -}}"
    "{%- if m['content'] is mapping or m['content'] is iterable -%}{{- m['content'] | tojson -}}"
    "{%- else -%}{{- m['content'] -}}{%- endif -%}{{- '<|eot|>' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|header_start|>assistant<|header_end|>\\n\\n' -}}{%- endif -%}")

# GLM-4.5 / 4.6: role tokens and no closing token, so a turn ends where the next role token
# starts; the model ends its turn by generating <|user|> or <|observation|> (EOS ids of its
# generation_config.json), which are tagged where they follow an assistant turn. Each assistant
# turn opens with "\n<think>...</think>", the reasoning kept only after the last user message;
# then "\n" + the stripped content if any, and tool calls as <arg_key>/<arg_value> pairs.
# enable_thinking=false appends "/nothink" to user messages and prompts with an empty think
# block. Its own way to fail: tool-call arguments given as a JSON string (it iterates a mapping).
GLM45 = (
    "{%- macro tail(m, c) -%}"
    "{%- if c.strip() -%}{{- '\\n' + c.strip() -}}{%- endif -%}"
    "{%- for tc in m['tool_calls'] or [] -%}{%- set f = tc['function'] or tc -%}"
    "{{- '\\n<tool_call>' + f['name'] + '\\n' -}}"
    "{%- for k, v in f['arguments'].items() -%}"
    "{{- '<arg_key>' + k + '</arg_key>\\n<arg_value>' + (v if v is string else v | tojson) + '</arg_value>\\n' -}}"
    "{%- endfor -%}{{- '</tool_call>' -}}{%- endfor -%}{%- endmacro -%}"
    "{%- macro opener(loop, token) -%}"
    "{%- if not loop.first and messages[loop.index0 - 1]['role'] == 'assistant' -%}"
    "{%- generation -%}{{- token -}}{%- endgeneration -%}{%- else -%}{{- token -}}{%- endif -%}{%- endmacro -%}"
    "{%- set off = enable_thinking is defined and not enable_thinking -%}"
    "{{- '[gMASK]<sop>' -}}"
    "{%- if tools -%}"
    "{{- '<|system|>\\n# Tools\\n\\nYou may call functions; their signatures are within <tools></tools>:\\n<tools>\\n' -}}"
    "{%- for t in tools -%}{{- t | tojson + '\\n' -}}{%- endfor -%}"
    "{{- '</tools>\\n\\nWrite each call as:\\n<tool_call>{function-name}\\n<arg_key>{arg-key}</arg_key>\\n"
    "<arg_value>{arg-value}</arg_value>\\n...\\n</tool_call>' -}}"
    "{%- endif -%}"
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- set c = m['content'] if m['content'] is string else '' -%}"
    "{%- if m['role'] == 'user' -%}{{- opener(loop, '<|user|>') + '\\n' + c -}}"
    "{%- if off and not c.endswith('/nothink') -%}{{- '/nothink' -}}{%- endif -%}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{%- if m['reasoning_content'] is string -%}{%- set r = m['reasoning_content'] -%}"
    "{%- elif '</think>' in c -%}"
    "{%- set r = c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') -%}"
    "{%- set c = c.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- else -%}{%- set r = '' -%}{%- endif -%}"
    "{%- set r = r.strip() if loop.index0 > ns.last_user else '' -%}"
    "{{- '<|assistant|>' -}}"
    "{%- if off and not r -%}{{- '\\n<think></think>' -}}"
    "{%- generation -%}{{- tail(m, c) -}}{%- endgeneration -%}"
    "{%- elif off -%}{{- '\\n<think>' -}}"
    "{%- generation -%}{{- r + '</think>' + tail(m, c) -}}{%- endgeneration -%}"
    "{%- else -%}{%- generation -%}{{- '\\n<think>' + r + '</think>' + tail(m, c) -}}{%- endgeneration -%}"
    "{%- endif -%}"
    "{%- elif m['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- opener(loop, '<|observation|>') -}}"
    "{%- endif -%}{{- '\\n<tool_response>\\n' + c + '\\n</tool_response>' -}}"
    "{%- elif m['role'] == 'system' -%}{{- '<|system|>\\n' + c -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- if off -%}{{- '\\n<think></think>' -}}{%- endif -%}"
    "{%- endif -%}")

# GPT-OSS (harmony): <|start|>role<|message|>...<|end|>; a system message of its own first (with
# today's date and "Reasoning: " + reasoning_effort), the conversation's system message and the
# tools (a TypeScript namespace) in a developer message. Answers are in the final channel: the
# last turn (without a generation prompt) renders its "thinking" in the analysis channel first
# and ends with <|return|>; earlier answers drop it and end with <|end|>, which stands for the
# <|return|> that was generated, so it is not tagged. A tool call keeps its analysis (thinking
# or content) unless a final answer follows, and ends with <|call|>. Its own way to fail: a
# tool-call turn with both content and thinking.
GPT_OSS = (
    "{%- macro ts(s) -%}"
    "{%- if s['type'] == 'string' -%}{{- 'string' -}}{%- elif s['type'] in ['number', 'integer'] -%}"
    "{{- 'number' -}}{%- elif s['type'] == 'boolean' -%}{{- 'boolean' -}}{%- else -%}{{- 'any' -}}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- macro functions(tools) -%}{{- '## functions\\n\\nnamespace functions {\\n\\n' -}}"
    "{%- for t in tools -%}{%- set f = t['function'] -%}"
    "{{- '// ' + f['description'] + '\\ntype ' + f['name'] + ' = ' -}}"
    "{%- if f['parameters'] and f['parameters']['properties'] -%}{{- '(_: {\\n' -}}"
    "{%- for k, s in f['parameters']['properties'].items() -%}"
    "{%- if s['description'] -%}{{- '// ' + s['description'] + '\\n' -}}{%- endif -%}"
    "{{- k + ('' if k in (f['parameters']['required'] or []) else '?') + ': ' + ts(s) + ',\\n' -}}"
    "{%- endfor -%}{{- '}) => any;\\n\\n' -}}"
    "{%- else -%}{{- '() => any;\\n\\n' -}}{%- endif -%}"
    "{%- endfor -%}{{- '} // namespace functions' -}}{%- endmacro -%}"
    "{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\\n"
    "Knowledge cutoff: 2024-06\\nCurrent date: ' + strftime_now('%Y-%m-%d') + '\\n\\nReasoning: '"
    " + (reasoning_effort if reasoning_effort is defined else 'medium') + '\\n\\n# Valid channels: "
    "analysis, commentary, final. Channel must be included for every message.' -}}"
    "{%- if tools -%}{{- \"\\nCalls to these tools must go to the commentary channel: 'functions'.\" -}}{%- endif -%}"
    "{{- '<|end|>' -}}"
    "{%- if messages[0]['role'] == 'system' -%}{%- set dev = messages[0]['content'] -%}"
    "{%- set msgs = messages[1:] -%}{%- else -%}{%- set dev = '' -%}{%- set msgs = messages -%}{%- endif -%}"
    "{%- if dev or tools -%}{{- '<|start|>developer<|message|>' -}}"
    "{%- if dev -%}{{- '# Instructions\\n\\n' + dev + '\\n\\n' -}}{%- endif -%}"
    "{%- if tools -%}{{- '# Tools\\n\\n' + functions(tools) -}}{%- endif -%}{{- '<|end|>' -}}{%- endif -%}"
    "{%- set last = namespace(call=none) -%}"
    "{%- for m in msgs -%}"
    "{%- if m['role'] == 'assistant' and 'tool_calls' in m -%}"
    "{%- set later = namespace(final=false) -%}"
    "{%- for f in msgs[loop.index:] -%}"
    "{%- if f['role'] == 'assistant' and 'tool_calls' not in f -%}{%- set later.final = true -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if m['content'] and m['thinking'] -%}"
    "{{- raise_exception('a tool-call turn cannot have both content and thinking') -}}{%- endif -%}"
    "{%- set pre = '' if later.final else (m['content'] or m['thinking']) -%}"
    "{%- set tc = m['tool_calls'][0]['function'] -%}"
    "{{- '<|start|>assistant' -}}{%- generation -%}"
    "{%- if pre -%}{{- '<|channel|>analysis<|message|>' + pre + '<|end|><|start|>assistant' -}}{%- endif -%}"
    "{{- ' to=functions.' + tc['name'] + '<|channel|>commentary json<|message|>' + tc['arguments'] | tojson"
    " + '<|call|>' -}}{%- endgeneration -%}"
    "{%- set last.call = tc['name'] -%}"
    "{%- elif m['role'] == 'assistant' and loop.last and not add_generation_prompt -%}"
    "{{- '<|start|>assistant' -}}{%- generation -%}"
    "{%- if 'thinking' in m -%}{{- '<|channel|>analysis<|message|>' + m['thinking'] + '<|end|><|start|>assistant' -}}"
    "{%- endif -%}{{- '<|channel|>final<|message|>' + m['content'] + '<|return|>' -}}{%- endgeneration -%}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{{- '<|start|>assistant' -}}{%- generation -%}{{- '<|channel|>final<|message|>' + m['content'] -}}"
    "{%- endgeneration -%}{{- '<|end|>' -}}{%- set last.call = none -%}"
    "{%- elif m['role'] == 'tool' -%}"
    "{{- '<|start|>functions.' + last.call + ' to=assistant<|channel|>commentary<|message|>' + m['content'] | tojson"
    " + '<|end|>' -}}"
    "{%- elif m['role'] == 'user' -%}{{- '<|start|>user<|message|>' + m['content'] + '<|end|>' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}")
