"""Pretraining compute: packed rows (`--pack 1`), attention within each document, and the loss
computed only where a label counts."""
import json

import torch
import torch.nn.functional as F

from dataset.lm_dataset import IGNORE_INDEX, PackedPretrainDataset, PretrainDataset, pad_collate
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
from trainer.trainer_utils import load_tokenizer


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return MiniMindForCausalLM(MiniMindConfig(hidden_size=64, num_hidden_layers=2))


def test_packed_rows_are_the_documents_end_to_end(tmp_path):
    texts = ["short one", "a somewhat longer document about packing rows", "x", "the last line of the file " * 3]
    path = tmp_path / "pretrain.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    tokenizer = load_tokenizer()
    docs = PretrainDataset(str(path), tokenizer, max_length=1 << 30)
    stream = torch.cat([docs[i]["input_ids"] for i in range(len(docs))])
    packed = PackedPretrainDataset(str(path), tokenizer, max_length=8)
    assert len(packed) == len(stream) // 8
    rows = [packed[i] for i in range(len(packed))]
    assert torch.equal(torch.cat([r["input_ids"] for r in rows]), stream[:8 * len(rows)])
    starts = torch.cumsum(torch.tensor([0] + [len(docs[i]["input_ids"]) for i in range(len(docs))]), 0)[:-1]
    for i, row in enumerate(rows):
        assert row["input_ids"].shape == (8,) and row["document_ids"][0] == 0
        for j in range(8):
            position = 8 * i + j
            new_document = j > 0 and position in starts.tolist()
            assert (row["labels"][j] == IGNORE_INDEX) == new_document
            assert row["document_ids"][j] == sum(1 for s in starts.tolist() if 8 * i < s <= position)


def test_attention_stays_within_each_document():
    """A packed row's logits equal each document's logits computed alone."""
    model = tiny_model().eval()
    g = torch.Generator().manual_seed(1)
    a, b, c = (torch.randint(10, 6000, (1, n), generator=g) for n in (5, 7, 4))
    row = torch.cat([a, b, c], dim=1)
    document_ids = torch.tensor([[0] * 5 + [1] * 7 + [2] * 4])
    with torch.no_grad():
        packed = model(row, document_ids=document_ids).logits
        alone = torch.cat([model(x).logits for x in (a, b, c)], dim=1)
    assert torch.allclose(packed, alone, atol=1e-5)


def test_document_attention_across_chunks_and_rows():
    """Rows longer than one attention chunk, documents crossing chunk edges, different per row."""
    from model.packing import DocumentAttention
    model = tiny_model(3).eval()
    g = torch.Generator().manual_seed(4)
    layouts = ([70, 50, 30, 10], [10, 100, 40, 10])  # 160 tokens: three chunks of 64
    assert sum(layouts[0]) > 2 * DocumentAttention.CHUNK
    rows, ids, expected = [], [], []
    for layout in layouts:
        docs = [torch.randint(10, 6000, (1, n), generator=g) for n in layout]
        rows.append(torch.cat(docs, dim=1))
        ids.append(torch.cat([torch.full((n,), d) for d, n in enumerate(layout)]))
        with torch.no_grad():
            expected.append(torch.cat([model(doc).logits for doc in docs], dim=1))
    with torch.no_grad():
        packed = model(torch.cat(rows), document_ids=torch.stack(ids)).logits
    assert torch.allclose(packed, torch.cat(expected), atol=1e-5)


def test_loss_only_equals_the_loss_over_full_logits():
    model = tiny_model(2)
    batch = pad_collate(0)([{"input_ids": torch.randint(10, 6000, (n,)), "labels": torch.randint(10, 6000, (n,))}
                            for n in (9, 4, 6)])
    batch["labels"][0, 2:5] = IGNORE_INDEX  # a masked-out stretch inside a row, like a prompt in SFT
    full = model(batch["input_ids"], labels=batch["labels"])
    full.loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    lean = model(batch["input_ids"], labels=batch["labels"], loss_only=True)
    lean.loss.backward()
    assert lean.logits is None
    assert torch.allclose(full.loss, lean.loss, atol=1e-6)
    for g_full, p in zip(grads, model.parameters()):
        assert torch.allclose(g_full, p.grad, atol=1e-6)
    logits, labels = full.logits[:, :-1], batch["labels"][:, 1:]
    expected = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE_INDEX)
    assert torch.allclose(lean.loss, expected, atol=1e-6)


def test_loss_only_on_full_and_packed_rows_equals_the_full_logits_loss():
    """Rows where every label counts (no gather) and packed rows with document ids: the same loss
    and gradients as the cross entropy over every position's logits."""
    model = tiny_model(2)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(10, 6000, (2, 12), generator=g)
    documents = torch.tensor([[0] * 5 + [1] * 7, [0] * 12])
    for extra in ({}, {"document_ids": documents}):
        full = model(ids, labels=ids, **extra)
        full.loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        lean = model(ids, labels=ids, loss_only=True, **extra)
        lean.loss.backward()
        assert torch.allclose(full.loss, lean.loss, atol=1e-6)
        for g_full, p in zip(grads, model.parameters()):
            assert torch.allclose(g_full, p.grad, atol=1e-6)
        model.zero_grad()
