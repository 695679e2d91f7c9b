"""What every export format shares: the tokenizer files, the generation config, the manifest, and a
folder that appears only once it is complete.

The manifest (`minimind_export.json`) says which weight the folder came from, in which format, and how
its verification went; the Models page lists exports from it.
"""
import contextlib
import json
import os
import shutil
import tempfile

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "chat_template.jinja")
#: Upstream MiniMind's chat sampling settings (eval_llm.py).
GENERATION_DEFAULTS = {"do_sample": True, "temperature": 0.85, "top_p": 0.85, "max_new_tokens": 512}
MANIFEST = "minimind_export.json"
#: Token ids of MiniMind's tokenizer: <|endoftext|> pads, <|im_start|> begins and <|im_end|> ends a turn.
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


def check_tokenizer(tokenizer_path):
    """A ValueError unless the folder holds a tokenizer.json."""
    if not os.path.isfile(os.path.join(tokenizer_path, "tokenizer.json")):
        raise ValueError(f"tokenizer folder {tokenizer_path} has no tokenizer.json")


def copy_tokenizer(tokenizer_path, folder):
    """Copy the tokenizer files (tokenizer_config.json carries the chat template) into `folder`."""
    for name in TOKENIZER_FILES:
        src = os.path.join(tokenizer_path, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(folder, name))


def chat_template(tokenizer_path):
    """The chat template (Jinja) of the tokenizer in `tokenizer_path`."""
    jinja = os.path.join(tokenizer_path, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            return f.read()
    with open(os.path.join(tokenizer_path, "tokenizer_config.json"), encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def write_generation_config(folder):
    """generation_config.json with upstream's sampling defaults and MiniMind's special ids."""
    from transformers import GenerationConfig
    GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                     **GENERATION_DEFAULTS).save_pretrained(folder)


def write_manifest(folder, record):
    """Write (or rewrite) the export's manifest in `folder`."""
    path = os.path.join(folder, MANIFEST)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, ensure_ascii=False)
    os.replace(path + ".tmp", path)


def read_manifest(folder):
    """The manifest of an export folder, or None."""
    try:
        with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def folder_size(folder):
    """Bytes of every file under `folder`."""
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder) for n in names)


def refuse_taken(out_dir):
    """FileExistsError for an existing, non-empty output folder: an export never overwrites anything."""
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        raise FileExistsError(f"{out_dir} exists and is not empty: choose a new folder")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise FileExistsError(f"{out_dir} exists and is not a folder: choose a new folder")


@contextlib.contextmanager
def staged_folder(out_dir):
    """Yield a fresh folder beside `out_dir`, renamed to `out_dir` when the block ends without an error,
    removed otherwise, so a failed export leaves nothing half-written."""
    refuse_taken(out_dir)
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        yield tmp
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.replace(tmp, out_dir)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
