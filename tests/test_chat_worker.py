"""The chat worker, a real process on a Unix socket: it streams generate()'s greedy tokens, loads a model once
for concurrent users, merges a LoRA on its base, samples reproducibly by seed, refuses bad requests
clearly and unloads idle models."""
import os
import signal
import threading

import pytest
import torch
from _runner_helpers import wait_for
from _trainer_helpers import save_random_weights

from mmcore.models import chat_client
from model.model_lora import apply_lora, load_lora, save_lora
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
from model.weights import load_tokenizer

MESSAGES = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one?"}]
SYSTEM = "You answer in one word."
NEW = 16


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    home = tmp_path_factory.mktemp("chat-home")
    chat_client.ensure_worker(home, idle_unload_s=3, exit_after_s=300, device="cpu", threads=1)
    yield home
    info = chat_client.status(home)
    if info:
        os.kill(info["pid"], signal.SIGTERM)


def model_from(weight, lora=None):
    model = MiniMindForCausalLM(MiniMindConfig(hidden_size=64, num_hidden_layers=2))
    model.load_state_dict(torch.load(weight, weights_only=True), strict=False)
    if lora:
        apply_lora(model)
        load_lora(model, lora)
    return model.float().eval()


def generate_ids(model, messages, system):
    tok = load_tokenizer()
    text = tok.apply_chat_template([{"role": "system", "content": system}] + messages, tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                             eos_token_id=tok.eos_token_id, pad_token_id=0)[0, ids.shape[1]:].tolist()
    return out[:out.index(tok.eos_token_id)] if tok.eos_token_id in out else out


def ask(home, weight, **extra):
    payload = {"weight": str(weight), "messages": MESSAGES, "system": SYSTEM, "temperature": 0,
               "max_new_tokens": NEW, **extra}
    return list(chat_client.chat(payload, home))


def test_worker_streams_the_same_greedy_tokens_as_generate(worker, tmp_path):
    weight = save_random_weights(tmp_path, "full_sft", seed=5)
    events = ask(worker, weight)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "loaded" and kinds[-1] == "done" and kinds.count("token") == len(events) - 2
    assert events[0]["device"] == "cpu"
    done = events[-1]
    assert [e["id"] for e in events if e["event"] == "token"] == done["ids"]
    assert "".join(e["text"] for e in events if e["event"] == "token") == done["text"]
    expected = generate_ids(model_from(weight), MESSAGES, SYSTEM)
    assert done["ids"] == expected and len(expected) > 0
    assert done["text"] == load_tokenizer().decode(expected, skip_special_tokens=True)
    assert done["first_token_s"] > 0


def test_concurrent_users_share_one_load_and_lora_is_applied(worker, tmp_path):
    weight = save_random_weights(tmp_path, "full_sft", seed=6)
    model = model_from(weight)
    apply_lora(model)
    torch.manual_seed(2)
    for name, p in model.named_parameters():
        if ".lora.B." in name:
            p.data.normal_(0, 1.0)  # large enough to change a random model's greedy reply
    lora = tmp_path / "lora_identity_64.pth"
    save_lora(model, lora)

    results = [None] * 3
    def run(i):
        results[i] = ask(worker, weight, lora=str(lora))
    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert all(r and r[-1]["event"] == "done" for r in results)
    assert sorted(r[0]["cached"] for r in results) == [False, True, True]  # loaded once
    expected = generate_ids(model_from(weight, lora), MESSAGES, SYSTEM)
    assert all(r[-1]["ids"] == expected for r in results)
    assert expected != generate_ids(model_from(weight), MESSAGES, SYSTEM)


def test_sampling_is_reproducible_by_seed_and_bad_requests_are_refused(worker, tmp_path):
    weight = save_random_weights(tmp_path, "full_sft", seed=7)
    sampled = [ask(worker, weight, temperature=1.0, top_p=0.9, seed=s)[-1]["ids"] for s in (11, 11, 12)]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]
    with pytest.raises(chat_client.ChatError, match="weight file not found"):
        ask(worker, tmp_path / "missing.pth")
    with pytest.raises(chat_client.ChatError, match="top_p must be a number between 0.0 and 1.0"):
        ask(worker, weight, top_p=3)
    notes = tmp_path / "notes.pth"
    notes.write_text("hello")
    with pytest.raises(chat_client.ChatError, match="is not a MiniMind state dict"):
        ask(worker, notes)


def test_idle_models_are_unloaded(worker, tmp_path):
    weight = save_random_weights(tmp_path, "full_sft", seed=8)
    ask(worker, weight)
    assert wait_for(lambda: chat_client.status(worker)["models"] == [], timeout=30)
    info = chat_client.status(worker)
    assert info["rss_mb"] > 0


def test_split_think_folds_the_reasoning():
    assert chat_client.split_think("<think>\nadd 2 and 3\n</think>\n<answer>5</answer>") == ("add 2 and 3", "5")
    assert chat_client.split_think("<think>still thinking") == ("still thinking", "")
    assert chat_client.split_think("plain answer") == (None, "plain answer")


def test_worker_scores_replies_with_a_reward_model(worker, tmp_path):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    from mmcore.workers.chat_engine import ModelPool, build_prompt, score_reply
    reward_dir = tmp_path / "rm"
    torch.manual_seed(0)
    LlamaForSequenceClassification(LlamaConfig(
        vocab_size=6400, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=256, num_labels=1, pad_token_id=0)).save_pretrained(reward_dir)
    AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(__file__), "..", "model")).save_pretrained(reward_dir)
    weight = save_random_weights(tmp_path, "grpo", seed=9)
    done = ask(worker, weight, reference="3", reasoning=True, reward_model_path=str(reward_dir))[-1]
    rewards = done["rewards"]
    assert rewards["rule"] is None and rewards["reward_model"] != 0
    assert rewards["total"] == pytest.approx(rewards["format"] + rewards["reward_model"])
    prompt = build_prompt(load_tokenizer(), MESSAGES, SYSTEM, True)
    expected = score_reply(prompt, done["text"], "3", True, ModelPool().reward_model(str(reward_dir)))
    assert rewards == pytest.approx(expected)
