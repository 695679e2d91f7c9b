"""What a MiniMind tokenizer is made of, for `train_tokenizer.py`: its special tokens, its ChatML chat
template (with upstream's default system prompt), its `tokenizer_config.json`, and the text it is trained
on: every text of MiniMind jsonl files of any format, plus a seed of the common Chinese characters.
"""
import json
import os

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant"

# ChatML. The first turn may be a system turn; without one the default system prompt is used.
# `add_generation_prompt` opens the assistant turn for generation. `<think>`/`<answer>` are plain text.
# Tool calling as upstream's template renders it: `tools=` (the data's `functions`) becomes the system
# turn's "# Tools" block; an assistant's `tool_calls` follow its content as `<tool_call>` JSON; `tool`
# messages are user turns of `<tool_response>` blocks (consecutive ones share one turn). Without tools,
# tool calls or tool messages, the rendering is the plain ChatML above.
TOOLS_INTRO = ("# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
               "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>")
TOOLS_OUTRO = ("\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, "
               "\"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n")
CHAT_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' -%}{{- messages[0]['content'] + '\\n\\n' }}{%- endif -%}"
    "{{- '" + TOOLS_INTRO + "' }}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) }}{%- endfor -%}"
    "{{- '" + TOOLS_OUTRO + "' }}"
    "{%- elif messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set content = message['content'] if message['content'] is string else '' -%}"
    "{%- if loop.first and message['role'] == 'system' -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + content }}"
    "{%- for call in (message['tool_calls'] or []) -%}"
    "{%- if content or not loop.first -%}{{- '\\n' }}{%- endif -%}"
    "{%- set call = call['function'] if call['function'] is defined else call -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + call['name'] + '\", \"arguments\": ' + "
    "(call['arguments'] if call['arguments'] is string else call['arguments'] | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' }}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' }}{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif -%}"
)


def gb2312_characters(first_row, last_row):
    """The characters of GB2312 rows first_row..last_row (stdlib codec, no download needed).
    Rows 0xA1-0xA3 are CJK and full-width punctuation, 0xB0-0xD7 the 3755 most common hanzi (level 1),
    0xD8-0xF7 the 3008 less common ones (level 2)."""
    chars = []
    for row in range(first_row, last_row + 1):
        for col in range(0xA1, 0xFF):
            try:
                chars.append(bytes([row, col]).decode("gb2312"))
            except UnicodeDecodeError:  # unassigned code points
                pass
    return chars


def seed_texts():
    """Chinese characters added to the training text, one per line.

    A small corpus (like the demo data) yields far fewer than 6400 merges. Seeding every common Chinese
    character makes each one a single token, whatever the data, and fills the vocabulary: the common
    ones are seen twice so their merges come before the rarer level-2 characters, which fill the rest.
    """
    common = gb2312_characters(0xA1, 0xA3) + gb2312_characters(0xB0, 0xD7)
    yield "\n".join(common)
    yield "\n".join(common)
    yield "\n".join(gb2312_characters(0xD8, 0xF7))


def iter_texts(paths, max_lines=None):
    """Yield the training text of jsonl files of any MiniMind format: pretrain "text", and the role
    and content of every message in "conversations" / "chosen" / "rejected"."""
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if max_lines is not None and i >= max_lines:
                    break
                if not line.strip():
                    continue
                obj = json.loads(line)
                if "text" in obj:
                    yield str(obj["text"])
                for key in ("conversations", "chosen", "rejected"):
                    messages = obj.get(key) or []
                    # The words the chat template adds (role names, default system prompt) count as
                    # often as they occur in rendered conversations, so they become single tokens.
                    if messages and messages[0].get("role") != "system":
                        yield f"system\n{DEFAULT_SYSTEM_PROMPT}"
                    for message in messages:
                        yield f"{message.get('role', '')}\n{message.get('content', '')}"


def tokenizer_config():
    """The tokenizer_config.json of a MiniMind tokenizer (upstream's fields)."""
    added = {str(i): {"content": tok, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, tok in enumerate(SPECIAL_TOKENS)}
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [],
        "bos_token": "<|im_start|>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "legacy": True,
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
    }


def save_folder(tokenizer, out_dir):
    """Write a trained `tokenizers.Tokenizer` into `out_dir` as a Hugging Face tokenizer folder."""
    os.makedirs(out_dir, exist_ok=True)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    tokenizer.model.save(out_dir)  # vocab.json + merges.txt, for tools that read the BPE files
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, ensure_ascii=False, indent=4)
        f.write("\n")
