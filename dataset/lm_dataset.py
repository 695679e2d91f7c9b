"""Datasets of the MiniMind trainers, over jsonl files (formats in `dataset.formats`).

Each dataset checks and indexes its file once at start (byte offsets only, no parsed lines kept in
memory), then reads and tokenizes one line per item. Items are unpadded; `pad_collate` pads a batch.
Labels follow the Hugging Face convention: `labels` equal `input_ids` where the loss counts and are
-100 elsewhere; the model shifts them itself.

Which dataset a training type uses: pretrain -> PretrainDataset; sft, lora, distillation,
distill_reason -> SFTDataset; dpo -> DPODataset; ppo, grpo, spo -> RLAIFDataset (see `dataset_for_type`).
With `--pack 1` each is replaced by its packed form (`packed_dataset`): PackedPretrainDataset,
PackedSFTDataset, PackedDPODataset, whose items carry `document_ids` (see `model.packing`).
"""
import json
import os

import torch
from torch.utils.data import Dataset

from dataset.formats import KIND_OF_TYPE, DataFormatError, chat_tools, rlaif_roles, scan_file, validate_file

# DataLoader workers are forked after the tokenizer has been used; its thread pool must not be.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

IGNORE_INDEX = -100
#: The document id of padding in packed rows: it belongs to no document.
PAD_DOCUMENT = -1

__all__ = ["DataFormatError", "validate_file", "PretrainDataset", "SFTDataset", "DPODataset", "RLAIFDataset",
           "PackedPretrainDataset", "PackedSFTDataset", "PackedDPODataset", "pad_collate", "dataset_for_type",
           "packed_dataset", "pack_whole", "IGNORE_INDEX", "PAD_DOCUMENT"]


class JsonlDataset(Dataset):
    """Lazy access to the records of a jsonl file, checked and indexed once at construction.

    The file handle is opened per process, so the dataset works in DataLoader workers (fork or spawn):
    a handle inherited through fork would share its read position with the parent.
    """
    kind = None

    def __init__(self, path, tokenizer, max_length):
        super().__init__()
        self.path = path
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.offsets = scan_file(path, self.kind)
        self._file = None
        self._file_pid = None

    def __len__(self):
        return len(self.offsets)

    def record(self, index):
        """The parsed JSON object of record `index`."""
        if self._file is None or self._file_pid != os.getpid():
            self._file = open(self.path, "rb")
            self._file_pid = os.getpid()
        self._file.seek(self.offsets[index])
        return json.loads(self._file.readline().decode("utf-8"))

    def __getstate__(self):
        # Spawned workers receive a pickled copy: without the open file, which they reopen.
        state = self.__dict__.copy()
        state["_file"] = None
        state["_file_pid"] = None
        return state

    def __del__(self):
        if getattr(self, "_file", None) is not None and self._file_pid == os.getpid():
            self._file.close()


class ChatMixin:
    """Chat-template rendering and the assistant-only loss mask, shared by SFT and DPO."""

    def _init_chat(self):
        tok = self.tokenizer
        # `<|im_start|>assistant\n` opens every assistant turn; `<|im_end|>\n` closes it (the chat
        # template puts a newline after every `<|im_end|>`).
        self.assistant_start = tok(f"{tok.bos_token}assistant\n", add_special_tokens=False)["input_ids"]
        self.assistant_end = tok(f"{tok.eos_token}\n", add_special_tokens=False)["input_ids"]

    def encode_chat(self, messages):
        """Token ids and labels of a conversation rendered as upstream's SFTDataset renders it: the messages whole
        (`tool_calls` and `tool` turns included) and a first system turn's `functions` as the chat
        template's `tools`; the loss covers each assistant turn (content and tool calls) and the
        `<|im_end|>\n` that closes it."""
        text = self.tokenizer.apply_chat_template(messages, tools=chat_tools(messages), tokenize=False,
                                                  add_generation_prompt=False)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:self.max_length]
        return torch.tensor(ids, dtype=torch.long), torch.tensor(self.assistant_labels(ids), dtype=torch.long)

    def assistant_labels(self, ids):
        """`ids` where a token belongs to an assistant reply, up to and including the `<|im_end|>\n`
        that ends it (as upstream's loss mask), else -100."""
        labels = [IGNORE_INDEX] * len(ids)
        start, n = self.assistant_start, len(self.assistant_start)
        end, m = self.assistant_end, len(self.assistant_end)
        i = 0
        while i < len(ids):
            if ids[i:i + n] == start:
                j = i + n
                while j < len(ids) and ids[j:j + m] != end:
                    j += 1
                stop = min(j + m, len(ids))  # include `<|im_end|>\n`, as far as truncation left it
                labels[i + n:stop] = ids[i + n:stop]
                i = stop
            else:
                i += 1
        return labels


class PretrainDataset(JsonlDataset):
    """Plain text, truncated to `max_length`; the loss counts on every token. Upstream's pretraining
    data already carries `<|im_start|>...<|im_end|>` and upstream adds nothing; here bos and eos are
    added only where the text lacks them, so both kinds of data train alike."""
    kind = "pretrain"

    def __getitem__(self, index):
        text = str(self.record(index)["text"])
        tok = self.tokenizer
        ids = tok(text, add_special_tokens=False, truncation=True, max_length=self.max_length)["input_ids"]
        bos = [] if text.startswith(tok.bos_token) else [tok.bos_token_id]
        eos = [] if text.rstrip().endswith(tok.eos_token) else [tok.eos_token_id]
        ids = (bos + ids + eos)[:self.max_length]
        input_ids = torch.tensor(ids, dtype=torch.long)
        return {"input_ids": input_ids, "labels": input_ids.clone()}


class SFTDataset(ChatMixin, JsonlDataset):
    """Conversations through the chat template (optional system turn, any number of turns);
    the loss counts only on assistant content and the `<|im_end|>\n` that closes it."""
    kind = "sft"

    def __init__(self, path, tokenizer, max_length):
        super().__init__(path, tokenizer, max_length)
        self._init_chat()

    def __getitem__(self, index):
        input_ids, labels = self.encode_chat(self.record(index)["conversations"])
        return {"input_ids": input_ids, "labels": labels}


class DPODataset(ChatMixin, JsonlDataset):
    """Preference pairs: the chosen and the rejected conversation, each encoded as in SFTDataset (a system
    turn's `functions` shown as tools, which upstream's DPODataset leaves out: docs/UPSTREAM.md)."""
    kind = "dpo"

    def __init__(self, path, tokenizer, max_length):
        super().__init__(path, tokenizer, max_length)
        self._init_chat()

    def __getitem__(self, index):
        record = self.record(index)
        chosen_ids, chosen_labels = self.encode_chat(record["chosen"])
        rejected_ids, rejected_labels = self.encode_chat(record["rejected"])
        return {"chosen_input_ids": chosen_ids, "chosen_labels": chosen_labels,
                "rejected_input_ids": rejected_ids, "rejected_labels": rejected_labels}


class RLAIFDataset(JsonlDataset):
    """RL prompts: `prompt` is the chat template over every turn but the last (the assistant's
    reference), with the generation prompt; `answer` is that reference's content.

    Both are strings: the RL trainers tokenize prompts themselves (left-padded, truncated to
    `max_length` tokens, the script's max_seq_len).
    """
    kind = "rlaif"

    def __getitem__(self, index):
        turns = self.record(index)["conversations"]
        messages = [{"role": role, "content": t["content"]} for role, t in zip(rlaif_roles(turns), turns)]
        prompt = self.tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
        return {"prompt": prompt, "answer": messages[-1]["content"]}


def pad_collate(pad_id, pad_to=None):
    """A DataLoader `collate_fn` that right-pads each tensor key to the batch's longest row (at least
    `pad_to` long when given: upstream pads every row to max_seq_len, which its MoE auxiliary loss counts).

    Keys ending in `input_ids` are padded with `pad_id` and get a matching attention mask
    (`input_ids` -> `attention_mask`, `chosen_input_ids` -> `chosen_attention_mask`, ...); keys ending in
    `labels` are padded with -100, in `document_ids` (packed rows) with PAD_DOCUMENT; other tensors
    with 0. Non-tensor values (strings) are collected into lists.
    """
    def collate(batch):
        out = {}
        for key in batch[0]:
            values = [item[key] for item in batch]
            if not torch.is_tensor(values[0]):
                out[key] = values
                continue
            if key.endswith("labels"):
                fill = IGNORE_INDEX
            elif key.endswith("document_ids"):
                fill = PAD_DOCUMENT
            elif key.endswith("input_ids"):
                fill = pad_id
            else:
                fill = 0
            width = max(max(v.shape[0] for v in values), pad_to or 0)
            padded = torch.full((len(values), width), fill, dtype=values[0].dtype)
            for row, v in enumerate(values):
                padded[row, :v.shape[0]] = v
            out[key] = padded
            if key.endswith("input_ids"):
                mask = torch.zeros((len(values), width), dtype=torch.long)
                for row, v in enumerate(values):
                    mask[row, :v.shape[0]] = 1
                out[key[:-len("input_ids")] + "attention_mask"] = mask
        return out
    return collate


_DATASETS = {"pretrain": PretrainDataset, "sft": SFTDataset, "dpo": DPODataset, "rlaif": RLAIFDataset}


def dataset_for_type(train_type):
    """The dataset class a training type reads (e.g. "grpo" -> RLAIFDataset)."""
    if train_type not in KIND_OF_TYPE:
        raise KeyError(f"unknown training type {train_type!r}; known: {', '.join(KIND_OF_TYPE)}")
    return _DATASETS[KIND_OF_TYPE[train_type]]


class PackedPretrainDataset(Dataset):
    """Pretraining text packed into full rows (`--pack 1`): every document encoded as
    `PretrainDataset` does, untruncated, the documents concatenated in file order (each keeps its
    end-of-text token as the separator), and the stream cut into rows of exactly `max_length` tokens
    (the last, shorter remainder is dropped). A document may continue from one row into the next.

    Items carry `document_ids` (which document each token belongs to, counted within the row): the
    model then attends only within each document and restarts positions at each document's start.
    The first token of a document is not a target of the token before it (label -100 there), so no
    loss asks a document to predict the next one.

    The whole file is tokenized once at construction (token ids kept in memory as int32).
    """

    def __init__(self, path, tokenizer, max_length):
        super().__init__()
        docs = PretrainDataset(path, tokenizer, max_length=1 << 30)
        pieces = [docs[i]["input_ids"] for i in range(len(docs))]
        lengths = torch.tensor([len(p) for p in pieces], dtype=torch.long)
        self.tokens = torch.cat(pieces).to(torch.int32) if pieces else torch.zeros(0, dtype=torch.int32)
        self.doc_starts = torch.cumsum(lengths, 0) - lengths  # stream offset of each document
        self.max_length = max_length
        self.num_documents = len(pieces)

    def __len__(self):
        return len(self.tokens) // self.max_length

    def __getitem__(self, index):
        start = index * self.max_length
        ids = self.tokens[start:start + self.max_length].long()
        offsets = torch.arange(start, start + self.max_length)
        document = torch.searchsorted(self.doc_starts, offsets, right=True)
        document_ids = document - document[0]
        labels = ids.clone()
        labels[1:][document_ids[1:] != document_ids[:-1]] = IGNORE_INDEX
        return {"input_ids": ids, "labels": labels, "document_ids": document_ids}


def pack_whole(widths, capacity):
    """Whole units into items whose rows hold at most `capacity` tokens each (best fit).

    `widths[u]` is unit u's lengths, one per row of an item (a conversation: one; a DPO pair: chosen
    and rejected). A unit goes whole into the open item with the least room that still holds it, else
    into a new item: no unit is split and the items come out nearly full. Deterministic (the same
    widths give the same items), so a resumed run reads the same rows. Returns the items, each the
    list of its units in the order they were placed.
    """
    items, rooms = [], []
    open_by_room = {}  # an open item's least room over its rows -> those items (a stack)
    open_rooms = 0  # bit r set: some open item's least room is r
    for unit, width in enumerate(widths):
        need = max(width)
        if need > capacity:
            raise ValueError(f"unit {unit} needs {need} tokens, more than a row's {capacity}")
        roomier = open_rooms >> need
        if roomier:
            least = need + (roomier & -roomier).bit_length() - 1
            stack = open_by_room[least]
            item = stack.pop()
            if not stack:
                open_rooms &= ~(1 << least)
        else:
            item = len(items)
            items.append([])
            rooms.append((capacity,) * len(width))
        items[item].append(unit)
        rooms[item] = tuple(room - w for room, w in zip(rooms[item], width))
        least = min(rooms[item])
        if least > 0:
            open_by_room.setdefault(least, []).append(item)
            open_rooms |= 1 << least
    return items


def _layout(items):
    """Items of units as flat tensors: the units in item order, and where each item's units start."""
    order = torch.tensor([unit for item in items for unit in item], dtype=torch.long)
    sizes = torch.tensor([len(item) for item in items], dtype=torch.long)
    return order, torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(sizes, 0)])


class _WholeUnits(Dataset):
    """Items of whole units (conversations, pairs) laid out by `pack_whole` from the units' `widths`."""

    def __init__(self, widths, max_length):
        super().__init__()
        self.order, self.bounds = _layout(pack_whole(widths, max_length))
        self.max_length = max_length

    def __len__(self):
        return len(self.bounds) - 1

    def units(self, index):
        """The indices of the units (in the unpacked dataset's numbering) in item `index`, in document order."""
        return self.order[self.bounds[index]:self.bounds[index + 1]].tolist()


def _packed_row(sequences, prefix=""):
    """One row of whole sequences, each an (input_ids, labels) pair: concatenated, `document_ids`
    numbering them from 0, and each sequence's first token no target of the token before it."""
    ids = torch.cat([s[0] for s in sequences])
    labels = torch.cat([s[1] for s in sequences])
    lengths = torch.tensor([len(s[0]) for s in sequences], dtype=torch.long)
    document_ids = torch.repeat_interleave(torch.arange(len(sequences)), lengths)
    labels[torch.cumsum(lengths, 0) - lengths] = IGNORE_INDEX
    return {f"{prefix}input_ids": ids, f"{prefix}labels": labels, f"{prefix}document_ids": document_ids}


class PackedSFTDataset(_WholeUnits):
    """Conversations packed whole into rows of at most `max_length` tokens (`--pack 1` for SFT, LoRA
    and both distillations).

    Exact: each conversation is encoded as SFTDataset encodes it (truncated to `max_length`, the same
    assistant-only labels) and placed whole in one row (`pack_whole`); with attention kept within each
    conversation and positions restarting at its start (`document_ids`, see `model.packing`), every
    token's logits, and so every per-token loss term and weight, are those of the conversation alone.
    A batch's loss, a mean over the labelled tokens of the conversations it holds, is the one the same
    conversations give unpacked; a packed batch holds more of them. A conversation's first token is
    never a target (unpacked it has no token before it), so no conversation predicts the next one.

    Construction encodes every conversation once for its length and keeps only the row layout;
    items are encoded again when read.
    """

    def __init__(self, path, tokenizer, max_length):
        self.conversations = SFTDataset(path, tokenizer, max_length)
        super().__init__([(len(self.conversations[i]["input_ids"]),) for i in range(len(self.conversations))],
                         max_length)

    def __getitem__(self, index):
        items = [self.conversations[u] for u in self.units(index)]
        return _packed_row([(x["input_ids"], x["labels"]) for x in items])


class PackedDPODataset(_WholeUnits):
    """Preference pairs packed whole (`--pack 1` for DPO): an item is two rows of at most `max_length`
    tokens, chosen and rejected, where document k of the rejected row is the rejected side of the pair
    whose chosen side is document k of the chosen row.

    Exact: each side is encoded as DPODataset encodes it and kept whole, so (with attention within
    each document) every side's per-token log-probabilities are those of the unpacked run, and the
    trainer's mean over each document's labelled tokens (`trainer.dpo_loss.sequence_log_probs`) is that
    side's sequence log-probability: every pair's DPO term, and the batch's mean over its pairs, are
    the unpacked ones. Construction encodes every pair once for its lengths, as PackedSFTDataset.
    """

    def __init__(self, path, tokenizer, max_length):
        self.pairs = DPODataset(path, tokenizer, max_length)
        widths = []
        for i in range(len(self.pairs)):
            pair = self.pairs[i]
            widths.append((len(pair["chosen_input_ids"]), len(pair["rejected_input_ids"])))
        super().__init__(widths, max_length)

    def __getitem__(self, index):
        pairs = [self.pairs[u] for u in self.units(index)]
        item = {}
        for side in ("chosen_", "rejected_"):
            item.update(_packed_row([(p[f"{side}input_ids"], p[f"{side}labels"]) for p in pairs], prefix=side))
        return item


_PACKED = {PretrainDataset: PackedPretrainDataset, SFTDataset: PackedSFTDataset, DPODataset: PackedDPODataset}


def packed_dataset(dataset_class):
    """The packed form of a dataset class, read with `--pack 1` (a packed class is its own)."""
    if dataset_class in _PACKED.values():
        return dataset_class
    if dataset_class not in _PACKED:
        raise ValueError(f"{dataset_class.__name__} has no packed form")
    return _PACKED[dataset_class]
