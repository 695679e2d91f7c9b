"""Smoke runs of the PPO, GRPO and SPO training scripts on CPU: a tiny model on a few demo prompts.

Each run is a real subprocess in a temporary copy of the repository layout (see _trainer_helpers),
starting from a random tiny `reason_64.pth`. Reward models are real transformers models (see
_reward_models): a sequence classifier and a remote-code model with `get_score`, both tiny and saved locally.
"""
import math
import signal
import sys

import pytest
import torch
from _reward_models import classifier_reward_model, get_score_reward_model  # noqa: F401  (fixtures)
from _trainer_helpers import (
    DEMO,
    free_port,
    head_jsonl,
    make_repo_copy,
    proc_output,
    progress_frame,
    run_trainer,
    save_random_weights,
    start_trainer,
    tiny_args,
    wait_for_text,
)

pytestmark = pytest.mark.timeout(1200)

# Small and fast: 16 new tokens, 2 prompts a step.
RL_TINY = {"max_seq_len": 48, "max_gen_len": 16, "batch_size": 2, "learning_rate": 1e-4,
           "reward_model_path": "none", "reasoning": 1}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A repository copy with a random tiny reason_64.pth in base/ and 4 RL prompts in data/."""
    root = make_repo_copy(tmp_path_factory.mktemp("rlrepo"))
    save_random_weights(root / "base", "reason", seed=3)
    head_jsonl(DEMO / "rlaif.jsonl", root / "data" / "rlaif.jsonl", 4)
    return root


def rl_args(repo, **overrides):
    return tiny_args(**{**RL_TINY, "data_path": repo / "data" / "rlaif.jsonl", "weight_dir": "../base",
                        **overrides})


def test_classifier_scores_a_batch_as_each_chat_alone(classifier_reward_model):
    """Batched reward-model scoring (right-padded, one forward per batch) equals one chat at a time."""
    from trainer.rl.reward_model import RewardModel
    from trainer.rl.rewards import reward_model_scores
    rm = RewardModel(str(classifier_reward_model))
    chats = [[{"role": "user", "content": "3+5=?"}, {"role": "assistant", "content": reply}]
             for reply in ("8", "<think>\nadd\n</think>\n<answer>\n8\n</answer>", "a much longer reply " * 5)]
    alone = [rm.score(chat) for chat in chats]
    assert rm.score_many(chats) == pytest.approx(alone, abs=1e-5)
    assert len(set(round(x, 4) for x in alone)) == 3  # different chats, different scores
    prompt = "<|im_start|>user\n3+5=?<|im_end|>\n<|im_start|>assistant\n"
    replies = [c[-1]["content"] for c in chats]
    # With reasoning, the reply with an answer block blends in its answer's score; all in one batch.
    batched = reward_model_scores(rm, [prompt] * 3, replies, reasoning=1)
    assert batched[0] == pytest.approx(max(min(alone[0], 3), -3), abs=1e-5)
    answer = rm.score([{"role": "user", "content": "3+5=?"}, {"role": "assistant", "content": "8"}])
    assert batched[1] == pytest.approx(0.4 * max(min(alone[1], 3), -3) + 0.6 * max(min(answer, 3), -3), abs=1e-5)


@pytest.fixture(autouse=True)
def trainer_environment(tmp_path, monkeypatch):
    """Keep transformers' copies of remote code out of the home folder; one torch thread per trainer
    (tiny models gain nothing from more, and on a busy machine extra threads wait on each other)."""
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "hf_modules"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def check_run(repo, proc, weight, resume, steps, columns):
    """Exit 0, the weight and resume files, and one parseable progress line per step with `columns`."""
    assert proc.returncode == 0, proc_output(proc)
    assert "Traceback" not in proc.stderr, proc_output(proc)
    assert (repo / "out" / weight).is_file(), proc_output(proc)
    assert (repo / "checkpoints" / resume).is_file(), proc_output(proc)
    frame = progress_frame(proc.stdout)
    assert list(frame["step"]) == list(range(1, steps + 1)), proc_output(proc)
    assert set(frame["total_steps"]) == {steps}
    for column in columns:
        assert frame[column].notna().all() and frame[column].map(math.isfinite).all(), (column, proc.stdout)
    return frame


GRPO_COLUMNS = ["Actor Loss", "Reward", "Avg Response Len", "LR", "Reward Std", "KL"]
SPO_COLUMNS = ["Actor Loss", "Reward", "Baseline", "KL", "Rho", "Avg Response Len", "LR"]
PPO_COLUMNS = ["Actor Loss", "Critic Loss", "Reward", "KL", "KL_ref", "Avg Response Len", "Actor LR", "Critic LR"]


def test_grpo_with_sequence_classifier_reward_model(repo, classifier_reward_model):
    proc = run_trainer(repo, "train_grpo.py", rl_args(repo, num_generations=2, save_weight="grpo_cls",
                                                      reward_model_path=classifier_reward_model))
    frame = check_run(repo, proc, "grpo_cls_64.pth", "grpo_cls_64_resume.pth", 2, GRPO_COLUMNS)
    # A random classifier's logits are never exactly zero, and are clipped to [-3, 3] (+ format <= 1.5).
    assert (frame["Reward"] != 0).all() and (frame["Reward"].abs() <= 4.5).all(), proc.stdout


def test_spo_rule_rewards_with_accumulation(repo):
    proc = run_trainer(repo, "train_spo.py", rl_args(repo, accumulation_steps=2, save_weight="spo_rule"))
    frame = check_run(repo, proc, "spo_rule_64.pth", "spo_rule_64_resume.pth", 2, SPO_COLUMNS)
    assert frame["Baseline"].iloc[0] == pytest.approx(0.5)
    assert frame["Rho"].iloc[0] == pytest.approx(0.9)  # first update: no earlier log-prob to compare
    assert ((frame["Rho"] >= 0.5) & (frame["Rho"] <= 0.96)).all()
    state = torch.load(repo / "checkpoints" / "spo_rule_64_resume.pth", weights_only=False)
    assert state["value_tracker"]["old_mean_logp"] is not None


def test_spo_with_get_score_reward_model(repo, get_score_reward_model, monkeypatch):
    from trainer.rules import roots
    monkeypatch.setenv(roots.TRUSTED_CODE_ENV, str(get_score_reward_model))  # its own code may run
    proc = run_trainer(repo, "train_spo.py", rl_args(repo, save_weight="spo_gs",
                                                     reward_model_path=get_score_reward_model))
    frame = check_run(repo, proc, "spo_gs_64.pth", "spo_gs_64_resume.pth", 2, SPO_COLUMNS)
    # Scores of about 5 are clipped to 3 (a random model earns no format reward).
    assert list(frame["Reward"]) == pytest.approx([3.0, 3.0]), proc.stdout
    # Rewards are normalised over [-3, 4.5] (format up to 1.5 + a score clipped to +-3): 3 -> 6 / 7.5 = 0.8.
    # The prior baseline, then one update with rho 0.9: (0.9 + 0.8) / (0.9 * 2 + 1).
    assert list(frame["Baseline"]) == pytest.approx([0.5, 1.7 / 2.8], abs=1e-4), proc.stdout


def test_ppo_saves_actor_and_critic_and_resumes(repo):
    proc = run_trainer(repo, "train_ppo.py", rl_args(repo, critic_learning_rate=1e-3, update_old_actor_freq=1))
    frame = check_run(repo, proc, "ppo_actor_64.pth", "ppo_actor_64_resume.pth", 2, PPO_COLUMNS)
    assert frame["Critic LR"].iloc[0] > frame["Actor LR"].iloc[0]
    critic = torch.load(repo / "out" / "ppo_critic_64.pth")
    assert critic["value_head.weight"].shape == (1, 64) and "model.layers.1.mlp.up_proj.weight" in critic
    state = torch.load(repo / "checkpoints" / "ppo_actor_64_resume.pth", weights_only=False)
    assert {"critic", "critic_optimizer"} <= state.keys()

    # A second epoch resumes from the saved state: only epoch 2's steps run.
    proc = run_trainer(repo, "train_ppo.py", rl_args(repo, critic_learning_rate=1e-3, epochs=2, from_resume=1))
    assert proc.returncode == 0, proc_output(proc)
    frame = progress_frame(proc.stdout)
    assert list(frame["epoch"]) == [2, 2] and list(frame["step"]) == [1, 2], proc.stdout


def test_grpo_moe_adds_no_aux_loss_and_needs_no_reference_without_kl(repo):
    """As upstream, RL losses leave out the MoE auxiliary loss: a random MoE policy earns no reward, so
    every advantage is 0 and, with beta 0 (no reference model built), the loss is exactly 0."""
    save_random_weights(repo / "base", "reason", use_moe=True)
    proc = run_trainer(repo, "train_grpo.py", rl_args(repo, use_moe=1, beta=0, num_generations=2,
                                                      save_weight="grpo_moe"))
    frame = check_run(repo, proc, "grpo_moe_64_moe.pth", "grpo_moe_64_moe_resume.pth", 2, GRPO_COLUMNS)
    assert (frame["Reward"] == 0).all(), proc.stdout
    assert (frame["Actor Loss"] == 0).all() and (frame["KL"] == 0).all(), proc.stdout


def test_missing_reward_model_fails_before_training(repo):
    missing = repo / "no_such_reward_model"
    proc = run_trainer(repo, "train_grpo.py", rl_args(repo, reward_model_path=missing, save_weight="grpo_missing"))
    assert proc.returncode == 1, proc_output(proc)
    assert str(missing) in proc.stderr and "Traceback" not in proc.stderr, proc_output(proc)
    assert "Params" not in proc.stdout and not (repo / "out" / "grpo_missing_64.pth").exists()


def test_grpo_rule_rewards_ddp_two_processes(repo):
    """GRPO with rule rewards under torchrun: 2 processes (gloo), 8 prompts -> 2 steps each."""
    data = head_jsonl(DEMO / "rlaif.jsonl", repo / "data" / "rlaif8.jsonl", 8)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_port", str(free_port())]
    proc = run_trainer(repo, "train_grpo.py", rl_args(repo, data_path=data, num_generations=4, save_weight="grpo_ddp"),
                       launcher=launcher)
    frame = check_run(repo, proc, "grpo_ddp_64.pth", "grpo_ddp_64_resume.pth", 2, GRPO_COLUMNS)
    assert proc.stdout.count("Policy Params") == 1  # rank 0 prints alone
    assert (frame["Avg Response Len"] <= 16).all() and (frame["Avg Response Len"] >= 1).all()
    assert (frame["Reward Std"] >= 0).all() and (frame["KL"] >= 0).all()
    weights = torch.load(repo / "out" / "grpo_ddp_64.pth")
    assert weights["model.embed_tokens.weight"].dtype == torch.float16
    state = torch.load(repo / "checkpoints" / "grpo_ddp_64_resume.pth", weights_only=False)
    assert (state["epoch"], state["step"], state["world_size"]) == (0, 2, 2)


def test_grpo_sigterm_saves_resume_state_and_resumes(repo, tmp_path):
    """SIGTERM mid-epoch: exit 143, the stop line, a resume file at an optimizer step; --from_resume 1
    then runs only the remaining steps and exits 0."""
    steps = 12
    data = head_jsonl(DEMO / "rlaif.jsonl", repo / "data" / "rlaif_stop.jsonl", 4, repeat=steps // 2)
    argv = rl_args(repo, data_path=data, max_gen_len=8, num_generations=2, save_weight="grpo_stop")
    log = tmp_path / "grpo_stop.log"
    proc = start_trainer(repo, "train_grpo.py", argv, log)
    wait_for_text(log, f"Step: 2/{steps},", proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 143, log.read_text()
    stopped_text = log.read_text()
    resume_file = repo / "checkpoints" / "grpo_stop_64_resume.pth"
    assert "Stopped by SIGTERM at epoch 1/1" in stopped_text, stopped_text
    assert f"resume state saved to {resume_file}" in stopped_text and "--from_resume 1" in stopped_text
    assert "Traceback" not in stopped_text, stopped_text
    state = torch.load(resume_file, weights_only=False)
    stopped_at = state["step"]
    assert state["epoch"] == 0 and 2 <= stopped_at < steps, stopped_text
    assert (repo / "out" / "grpo_stop_64.pth").is_file()

    resumed = run_trainer(repo, "train_grpo.py", argv + ["--from_resume", "1"])
    assert resumed.returncode == 0, proc_output(resumed)
    assert f"skipping the first {stopped_at} steps" in resumed.stdout, resumed.stdout
    frame = progress_frame(resumed.stdout)
    assert list(frame["step"]) == list(range(stopped_at + 1, steps + 1)), resumed.stdout
    assert torch.load(resume_file, weights_only=False)["step"] == steps
