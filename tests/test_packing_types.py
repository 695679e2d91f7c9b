"""`--pack 1` for the supervised types (SFT, LoRA, reasoning distillation, distillation, DPO): whole
conversations (DPO: whole pairs) packed into rows, exact.

A packed batch's loss, and each conversation's (each pair's) own terms, equal the unpacked run's over the
same conversations, to 1e-6 (absolute, or relative to a value above 1) in float32 on a tiny model; each
trainer runs a few real steps with `--pack 1`; MoE runs whose loss adds the router's auxiliary loss are
refused.
"""
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from _trainer_helpers import DEMO, head_jsonl, make_repo_copy, proc_output, progress_frame, run_trainer, \
    save_random_weights, tiny_args

from dataset.lm_dataset import (
    IGNORE_INDEX,
    DPODataset,
    PackedDPODataset,
    PackedPretrainDataset,
    PackedSFTDataset,
    PretrainDataset,
    RLAIFDataset,
    SFTDataset,
    pack_whole,
    packed_dataset,
    pad_collate,
)
from model.model_lora import apply_lora
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
from trainer import trainer_utils as tu
from trainer.rules.setup_errors import PackingRefused, pack_refusal
from trainer.train_distill_reason import TAGS, make_reason_loss_fn
from trainer.train_distillation import make_distill_loss_fn
from trainer.dpo_loss import make_dpo_loss_fn, sequence_log_probs
from trainer.train_pretrain import lm_loss

ROW = 160  # tokens per packed row: several demo conversations each, and more than one attention chunk (64)
TOLERANCE = 1e-6  # float32: the packed rows' attention runs in other kernels, so the last bits may differ


@pytest.fixture(scope="module")
def tokenizer():
    return tu.load_tokenizer()


def tiny_model(seed=0, hidden_size=64):
    torch.manual_seed(seed)
    return MiniMindForCausalLM(MiniMindConfig(hidden_size=hidden_size, num_hidden_layers=2))


def close(a, b):
    return torch.allclose(torch.as_tensor(a), torch.as_tensor(b), atol=TOLERANCE, rtol=TOLERANCE)


def packed_and_unpacked(dataset, rows):
    """A batch of packed rows and the batch of the same units unpacked (each padded to the longest)."""
    collate = pad_collate(0)
    units = [u for r in rows for u in dataset.units(r)]
    source = dataset.conversations if isinstance(dataset, PackedSFTDataset) else dataset.pairs
    return collate([dataset[r] for r in rows]), collate([source[u] for u in units]), units


# ---------------------------------------------------------------------------------------------------
# The packer and the packed datasets

def test_pack_whole_places_every_unit_once_within_the_rows():
    g = torch.Generator().manual_seed(0)
    widths = [(int(n),) for n in torch.randint(1, 100, (500,), generator=g)]
    items = pack_whole(widths, 128)
    assert sorted(u for item in items for u in item) == list(range(500))
    assert all(sum(widths[u][0] for u in item) <= 128 for item in items)
    assert pack_whole(widths, 128) == items  # deterministic: a resumed run reads the same rows
    total = sum(w[0] for w in widths)
    assert len(items) <= math.ceil(total / 128) * 1.1  # best fit: nearly full rows
    pairs = [(int(a), int(b)) for a, b in torch.randint(1, 100, (300, 2), generator=g)]
    items = pack_whole(pairs, 128)
    assert sorted(u for item in items for u in item) == list(range(300))
    for side in (0, 1):
        assert all(sum(pairs[u][side] for u in item) <= 128 for item in items)
    with pytest.raises(ValueError):
        pack_whole([(129,)], 128)


def test_packed_sft_rows_are_the_conversations_whole(tokenizer, tmp_path):
    data = head_jsonl(DEMO / "sft.jsonl", tmp_path / "sft.jsonl", 60)
    packed = PackedSFTDataset(str(data), tokenizer, ROW)
    alone = SFTDataset(str(data), tokenizer, ROW)
    assert sorted(u for r in range(len(packed)) for u in packed.units(r)) == list(range(len(alone)))
    assert len(packed) < len(alone) / 2
    for r in range(len(packed)):
        row = packed[r]
        assert len(row["input_ids"]) <= ROW and row["document_ids"][0] == 0
        start = 0
        for k, u in enumerate(packed.units(r)):
            item = alone[u]
            n = len(item["input_ids"])
            assert torch.equal(row["input_ids"][start:start + n], item["input_ids"])
            assert (row["document_ids"][start:start + n] == k).all()
            # the loss mask is the conversation's; its first token, never a target unpacked, is none here
            assert row["labels"][start] == IGNORE_INDEX
            assert torch.equal(row["labels"][start + 1:start + n], item["labels"][1:])
            start += n
        assert start == len(row["input_ids"])


def test_packed_dpo_items_pair_document_k_of_both_rows(tokenizer, tmp_path):
    data = head_jsonl(DEMO / "dpo.jsonl", tmp_path / "dpo.jsonl", 40)
    packed = PackedDPODataset(str(data), tokenizer, ROW)
    alone = DPODataset(str(data), tokenizer, ROW)
    assert sorted(u for r in range(len(packed)) for u in packed.units(r)) == list(range(len(alone)))
    for r in range(len(packed)):
        item = packed[r]
        for side in ("chosen_", "rejected_"):
            docs = item[f"{side}document_ids"]
            assert len(docs) <= ROW and int(docs.max()) + 1 == len(packed.units(r))
            for k, u in enumerate(packed.units(r)):
                assert torch.equal(item[f"{side}input_ids"][docs == k], alone[u][f"{side}input_ids"])


def test_packed_dataset_forms():
    assert packed_dataset(PretrainDataset) is PackedPretrainDataset
    assert packed_dataset(PackedPretrainDataset) is PackedPretrainDataset
    assert packed_dataset(SFTDataset) is PackedSFTDataset and packed_dataset(DPODataset) is PackedDPODataset
    with pytest.raises(ValueError):
        packed_dataset(RLAIFDataset)


def test_padding_of_packed_rows_belongs_to_no_document():
    rows = [{"input_ids": torch.ones(n, dtype=torch.long), "document_ids": torch.zeros(n, dtype=torch.long)}
            for n in (3, 5)]
    batch = pad_collate(0)(rows)
    assert batch["document_ids"][0].tolist() == [0, 0, 0, -1, -1]


# ---------------------------------------------------------------------------------------------------
# Exactness: packed losses equal the unpacked run's over the same conversations

@pytest.fixture(scope="module")
def sft_rows(tokenizer, tmp_path_factory):
    data = head_jsonl(DEMO / "sft.jsonl", tmp_path_factory.mktemp("sft") / "sft.jsonl", 40)
    return PackedSFTDataset(str(data), tokenizer, ROW)


def per_conversation_losses(model, batch):
    """Each conversation's loss, the mean next-token cross entropy over its reply tokens: packed rows by
    document, unpacked by row."""
    documents = batch.get("document_ids")
    logits = model(batch["input_ids"], document_ids=documents).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    token = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE_INDEX,
                            reduction="none").view(labels.shape)
    counted = labels != IGNORE_INDEX
    if documents is None:
        return token.sum(dim=1) / counted.sum(dim=1)
    targets_of = documents[:, 1:]
    return torch.cat([torch.stack([token[r][targets_of[r] == k].sum() / counted[r][targets_of[r] == k].sum()
                                   for k in range(int(targets_of[r].max()) + 1)]) for r in range(len(targets_of))])


@pytest.mark.parametrize("lora", [False, True], ids=["sft", "lora"])
def test_sft_and_lora_losses_equal_unpacked(sft_rows, lora):
    model = tiny_model(1)
    if lora:
        apply_lora(model)
        with torch.no_grad():  # adapters off zero, so they change the outputs
            for name, p in model.named_parameters():
                if ".lora." in name:
                    p.normal_(0, 0.05)
    packed, unpacked, units = packed_and_unpacked(sft_rows, [0, 1, 2])
    assert len(units) > 3
    loss_packed = lm_loss(model, packed)[0]
    loss_packed.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss_unpacked = lm_loss(model, unpacked)[0]
    loss_unpacked.backward()
    assert close(loss_packed, loss_unpacked), (loss_packed, loss_unpacked)
    for name, p in model.named_parameters():
        if name in grads:
            assert torch.allclose(grads[name], p.grad, atol=1e-6, rtol=1e-4), name
    with torch.no_grad():
        assert close(per_conversation_losses(model, packed), per_conversation_losses(model, unpacked))


def test_distill_reason_loss_equals_unpacked(tokenizer, tmp_path):
    data = head_jsonl(DEMO / "reason.jsonl", tmp_path / "reason.jsonl", 30)
    rows = PackedSFTDataset(str(data), tokenizer, 256)
    loss_fn = make_reason_loss_fn([tokenizer(tag, add_special_tokens=False).input_ids for tag in TAGS])
    model = tiny_model(2)
    packed, unpacked, units = packed_and_unpacked(rows, [0, 1])
    assert len(units) > 2
    tags = tokenizer("<think>", add_special_tokens=False).input_ids
    assert any(tags[0] in packed["labels"][r].tolist() for r in range(2))  # weighted tags are in the batch
    with torch.no_grad():
        assert close(loss_fn(model, packed)[0], loss_fn(model, unpacked)[0])


def test_distillation_losses_equal_unpacked(sft_rows):
    student, teacher = tiny_model(3), tiny_model(4, hidden_size=128).eval()
    loss_fn = make_distill_loss_fn(teacher, alpha=0.5, temperature=1.5)
    packed, unpacked, _ = packed_and_unpacked(sft_rows, [3, 4])
    with torch.no_grad():
        loss_p, metrics_p = loss_fn(student, packed)
        loss_u, metrics_u = loss_fn(student, unpacked)
    assert close(loss_p, loss_u)
    assert close(metrics_p["ce"], metrics_u["ce"]) and close(metrics_p["distill"], metrics_u["distill"])
    assert metrics_p["distill"] > 0


def test_dpo_loss_and_each_pair_equal_unpacked(tokenizer, tmp_path):
    data = head_jsonl(DEMO / "dpo.jsonl", tmp_path / "dpo.jsonl", 24)
    items = PackedDPODataset(str(data), tokenizer, ROW)
    policy, reference = tiny_model(5), tiny_model(6)
    loss_fn = make_dpo_loss_fn(reference, beta=0.1, pad_id=0)
    packed, unpacked, units = packed_and_unpacked(items, [0, 1])
    assert len(units) > 2
    with torch.no_grad():
        loss_p, metrics_p = loss_fn(policy, packed)
        loss_u, metrics_u = loss_fn(policy, unpacked)
        assert close(loss_p, loss_u) and loss_u > 0
        for name in ("chosen_reward", "rejected_reward", "accuracy"):
            assert close(metrics_p[name], metrics_u[name]), name
        # each side of each pair: its own length-normalised log-probability
        for side in ("chosen_", "rejected_"):
            documents = packed[f"{side}document_ids"]
            logps = sequence_log_probs(policy(packed[f"{side}input_ids"], document_ids=documents).logits,
                                       packed[f"{side}labels"], documents)
            held = torch.stack([(documents == k).any(dim=1) for k in range(logps.size(1))], dim=1)
            alone = sequence_log_probs(policy(unpacked[f"{side}input_ids"]).logits, unpacked[f"{side}labels"])
            assert close(logps[held], alone)


# ---------------------------------------------------------------------------------------------------
# What cannot be exact is refused

def test_moe_with_an_auxiliary_loss_is_refused(tmp_path, tokenizer):
    for train_type in ("sft", "lora", "distill_reason", "distillation"):
        refusal = pack_refusal(train_type, 1, 1)
        assert isinstance(refusal, PackingRefused) and "--use_moe 1" in str(refusal) and train_type in str(refusal)
        assert pack_refusal(train_type, 0, 1) is None and pack_refusal(train_type, 1, 0) is None
    assert pack_refusal("dpo", 1, 1) is None  # DPO adds no auxiliary loss
    data = head_jsonl(DEMO / "sft.jsonl", tmp_path / "sft.jsonl", 4)
    args = SimpleNamespace(data_path=str(data), max_seq_len=ROW, pack=1, use_moe=1)
    with pytest.raises(PackingRefused):
        tu.load_dataset(SFTDataset, args, tokenizer, "sft")
    args.use_moe = 0
    assert isinstance(tu.load_dataset(SFTDataset, args, tokenizer, "sft"), PackedSFTDataset)


# ---------------------------------------------------------------------------------------------------
# Real runs with --pack 1

@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = make_repo_copy(tmp_path_factory.mktemp("repo"))
    save_random_weights(root / "base", "full_sft", seed=1)
    save_random_weights(root / "base", "teacher", hidden_size=128, seed=2)
    return root


def packed_run(repo, script, source, lines, weight, tokenizer, dataset_class, **options):
    """Run a trainer with --pack 1 on `lines` lines of a demo file: exit 0, one progress line per packed
    batch (fewer than the unpacked run's), finite losses, the weight file."""
    data = head_jsonl(DEMO / source, repo / "data" / f"pack_{script}.jsonl", lines)
    argv = tiny_args(data_path=data, pack=1, max_seq_len=128, batch_size=2, weight_dir="../base", **options)
    proc = run_trainer(repo, script, argv)
    assert proc.returncode == 0, proc_output(proc)
    assert "Traceback" not in proc.stderr, proc_output(proc)
    rows = len(dataset_class(str(data), tokenizer, 128))
    frame = progress_frame(proc.stdout)
    assert list(frame["step"]) == list(range(1, math.ceil(rows / 2) + 1)) and rows < lines / 1.5
    assert frame["loss"].notna().all() and (frame["loss"] > 0).all()
    assert (repo / "out" / weight).is_file(), proc_output(proc)
    return frame


def test_sft_runs_packed(repo, tokenizer):
    packed_run(repo, "train_full_sft.py", "sft.jsonl", 24, "sft_pack_64.pth", tokenizer, PackedSFTDataset,
               from_weight="full_sft", save_weight="sft_pack")


def test_lora_runs_packed(repo, tokenizer):
    packed_run(repo, "train_lora.py", "lora_identity.jsonl", 24, "lora_pack_64.pth", tokenizer, PackedSFTDataset,
               from_weight="full_sft", lora_name="lora_pack", save_dir="../out")


def test_distill_reason_runs_packed(repo, tokenizer):
    packed_run(repo, "train_distill_reason.py", "reason.jsonl", 12, "reason_pack_64.pth", tokenizer,
               PackedSFTDataset, from_weight="full_sft", save_weight="reason_pack")


def test_distillation_runs_packed(repo, tokenizer):
    frame = packed_run(repo, "train_distillation.py", "sft.jsonl", 24, "dist_pack_64.pth", tokenizer,
                       PackedSFTDataset, from_student_weight="full_sft", from_teacher_weight="teacher",
                       student_hidden_size=64, student_num_layers=2, teacher_hidden_size=128, teacher_num_layers=2,
                       hidden_size=None, num_hidden_layers=None, save_weight="dist_pack")
    assert (frame["distill"] > 0).all()


def test_dpo_runs_packed_and_starts_at_log2(repo, tokenizer):
    frame = packed_run(repo, "train_dpo.py", "dpo.jsonl", 16, "dpo_pack_64.pth", tokenizer, PackedDPODataset,
                       from_weight="full_sft", save_weight="dpo_pack", learning_rate=1e-4)
    assert frame["loss"].iloc[0] == pytest.approx(math.log(2), abs=1e-5)  # policy == reference at first


def test_moe_sft_run_is_refused_with_one_line(repo):
    data = head_jsonl(DEMO / "sft.jsonl", repo / "data" / "pack_moe.jsonl", 4)
    proc = run_trainer(repo, "train_full_sft.py", tiny_args(data_path=data, pack=1, use_moe=1, from_weight="none",
                                                             save_weight="never"))
    assert proc.returncode == 1, proc_output(proc)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, proc_output(proc)
    assert errors[0].startswith("ERROR: --pack 1 cannot be used with --use_moe 1 for sft"), proc_output(proc)
    assert "Epoch:" not in proc.stdout
