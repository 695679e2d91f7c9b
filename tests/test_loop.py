"""Unit tests of trainer/loop.py (schedule, progress line, tracker, run paths), trainer/stopping.py (SIGTERM) and
trainer/checkpoint.py (atomic saves, resume state), in-process."""
import math
import os
import re
import signal
import types

import pytest
import torch

from trainer import checkpoint, loop, stopping
from trainer import trainer_utils as tu
from trainer.rules import specs


def test_cosine_schedule_matches_upstream():
    # Upstream's supervised schedule: lr/10 + lr/2 * (1 + cos(pi t / T)): 1.1 lr, 0.6 lr, 0.1 lr.
    assert loop.get_lr(0, 100, 1e-3) == pytest.approx(1.1e-3)
    assert loop.get_lr(50, 100, 1e-3) == pytest.approx(0.6e-3)
    assert loop.get_lr(100, 100, 1e-3) == pytest.approx(1e-4)
    assert loop.get_lr(30, 100, 2.0) == pytest.approx(0.2 + 1.0 * (1 + math.cos(math.pi * 0.3)))
    # The RL trainers' cosine annealing from lr to lr/10 (upstream's CosineAnnealingLR, eta_min = lr/10).
    assert loop.annealed_lr(0, 100, 1e-3) == pytest.approx(1e-3)
    assert loop.annealed_lr(50, 100, 1e-3) == pytest.approx(0.55e-3)
    assert loop.annealed_lr(100, 100, 1e-3) == pytest.approx(1e-4)


def test_file_names_follow_minimind_conventions(tmp_path):
    values = {**specs.spec("dpo").defaults(), "hidden_size": 512, "use_moe": 1}
    assert checkpoint.resume_path(specs.spec("dpo"), values, directory=str(tmp_path)) == str(
        tmp_path / "dpo_512_moe_resume.pth")
    assert checkpoint.resume_path(specs.spec("dpo"), values) == os.path.join(tu.CHECKPOINT_DIR, "dpo_512_moe_resume.pth")
    assert tu.CHECKPOINT_DIR == os.path.join(os.path.dirname(tu.TRAINER_DIR), "checkpoints")
    # A run's weight files: `{save_dir}/{save_weight}_{h}[_moe].pth`, PPO's critic beside its actor.
    run = loop.Run("ppo", types.SimpleNamespace(**{**specs.spec("ppo").defaults(), "hidden_size": 640}), None, None)
    assert run.weight_paths() == [os.path.join("../out", "ppo_actor_640.pth"), os.path.join("../out", "ppo_critic_640.pth")]
    assert run.resume_path() == os.path.join(tu.CHECKPOINT_DIR, "ppo_actor_640_resume.pth")


def test_progress_line_is_the_upstream_format_and_parses():
    line = loop.format_progress(0, 2, 100, 44160, 8.896761, 0.000549999999, 332.0)
    assert line == "Epoch:[1/2](100/44160) loss:8.896761 lr:0.000549999999 epoch_Time:332.0min:"
    extra = loop.format_progress(0, 6, 10, 500, 2.1, 5e-6, 3.0, {"ce": 1.9, "distill": 2.3})
    assert re.fullmatch(r"Epoch:\[1/6\]\(10/500\) loss:2\.100000 ce:1\.900000 distill:2\.300000 lr:\S+ "
                        r"epoch_Time:3\.0min:", extra)
    from mmcore.logs.log_parser import LogParser
    parser = LogParser("unused")
    parser.feed((line + "\n" + extra + "\n").encode())
    records = parser.records
    assert records[0]["loss"] == pytest.approx(8.896761) and records[0]["lr"] == pytest.approx(0.000549999999)
    assert records[1]["ce"] == pytest.approx(1.9) and records[1]["distill"] == pytest.approx(2.3)


def test_atomic_save_leaves_no_temp_file(tmp_path):
    path = tmp_path / "sub" / "w.pth"
    checkpoint.atomic_torch_save({"x": torch.arange(3)}, str(path))
    assert torch.equal(torch.load(path)["x"], torch.arange(3))
    assert os.listdir(path.parent) == ["w.pth"]


def test_resume_state_round_trip_and_world_size_change(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = str(tmp_path / "x_64_resume.pth")
    checkpoint.save_resume(path, model=model, optimizer=optimizer, epoch=1, step=6, world_size=2, global_step=16)
    state = checkpoint.load_resume(path, world_size=2)
    assert (state["epoch"], state["step"], state["world_size"]) == (1, 6, 2)
    assert torch.equal(state["model"]["weight"], model.weight.detach())
    assert state["optimizer"]["state"] and state["scheduler"]["global_step"] == 16
    # Four processes instead of two: the same samples are done after half the steps.
    assert checkpoint.load_resume(path, world_size=4)["step"] == 3
    assert checkpoint.load_resume(path, world_size=1)["step"] == 12
    assert checkpoint.load_resume(str(tmp_path / "missing.pth"), world_size=1) is None


def test_stop_signal_finishes_the_step_once_armed():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        stop = stopping.StopSignal()
        with pytest.raises(SystemExit) as exit_info:  # before training: leave at once
            os.kill(os.getpid(), signal.SIGTERM)
        assert exit_info.value.code == tu.SIGTERM_EXIT
        stop.arm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.should_stop()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_tracker_missing_is_a_warning(capsys):
    for name in ("wandb", "swanlab"):
        try:
            __import__(name)
            pytest.skip(f"{name} is installed here")
        except ImportError:
            pass
    args = types.SimpleNamespace(use_wandb=True, wandb_project="p")
    assert loop.init_tracker(args, "run") is None
    assert "WARNING: --use_wandb" in capsys.readouterr().out
    assert loop.init_tracker(types.SimpleNamespace(use_wandb=False), "run") is None


def _toy_run(tmp_path, monkeypatch, **overrides):
    """A `Run` of type ppo over toy options: no torchrun, resume state and weights under tmp_path."""
    values = {**specs.spec("ppo").defaults(), "device": "cpu", "dtype": "float32", "num_workers": 0, "epochs": 1,
              "batch_size": 1, "log_interval": 1, "save_interval": 1000, "save_dir": str(tmp_path), **overrides}
    run = loop.Run("ppo", types.SimpleNamespace(**values), tu.DistInfo(False, 0, 0, 1, "cpu"), stopping.StopSignal())
    monkeypatch.setattr(run, "resume_path", lambda: str(tmp_path / "toy_resume.pth"))
    return run


def test_train_accumulates_at_upstreams_boundary_and_saves_every_part(tmp_path, monkeypatch, capsys):
    previous = signal.getsignal(signal.SIGTERM)
    try:
        torch.manual_seed(0)
        run = _toy_run(tmp_path, monkeypatch, accumulation_steps=2, learning_rate=0.1, critic_learning_rate=0.2)
        actor, critic = run.part("actor", torch.nn.Linear(2, 1), 0.1), run.part("critic", torch.nn.Linear(2, 1), 0.2)
        dataset = [torch.full((2,), float(i)) for i in range(6)]
        updates = []

        def step_fn(batch):
            x = batch["x"]
            return actor.model(x).pow(2).mean() + critic.model(x).pow(2).mean(), {"x": x.sum()}

        loop.train(run, [actor, critic], dataset, lambda items: {"x": torch.stack(items)}, step_fn, run_name="toy",
                   progress_line=loop.template_line("{step}/{iters} {lr:.4f} {lr_1:.4f} x={x:.1f}"),
                   after_update=updates.append)
    finally:
        signal.signal(signal.SIGTERM, previous)
    # Upstream's boundary, (step + 1) % 2 == 0: after steps 1, 3, 5; the epoch's last step (6) is not applied.
    assert updates == [1, 3, 5]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"1/6 {loop.get_lr(1, 6, 0.1):.4f} {loop.get_lr(1, 6, 0.2):.4f} x={lines[0].split('x=')[1]}"
    assert len(lines) == 6
    state = torch.load(tmp_path / "toy_resume.pth", weights_only=False)
    assert (state["epoch"], state["step"]) == (0, 5)  # the last optimizer boundary
    assert {"model", "optimizer", "critic", "critic_optimizer"} <= state.keys()
    assert torch.equal(state["critic"]["weight"], critic.module.weight.detach())
    assert sorted(os.listdir(tmp_path)) == ["ppo_actor_512.pth", "ppo_actor_512.pth.meta.json", "ppo_critic_512.pth",
                                            "ppo_critic_512.pth.meta.json", "toy_resume.pth", "toy_resume.pth.meta.json"]


def _toy_train(tmp_path, monkeypatch, *, epochs=1, noise=False, stop_at=None, from_resume=0, run_dir="records"):
    """A one-part toy run of 10 micro-batches an epoch (batch size 1, x = 1..10, shuffled per epoch),
    --accumulation_steps 4, loss = w * x (times a random factor with `noise`). A SIGTERM is faked after
    global step `stop_at`. Returns (micro-batches as (global step, x, loss), updates as (global step,
    the gradient applied), the model)."""
    previous = signal.getsignal(signal.SIGTERM)
    run = _toy_run(tmp_path, monkeypatch, epochs=epochs, accumulation_steps=4, grad_clip=1e9, learning_rate=0.01,
                   from_resume=from_resume, run_dir=str(tmp_path / run_dir))
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    part = run.part("actor", model, 0.01)
    seen, updates = [], []
    part.optimizer.register_step_pre_hook(
        lambda *_: updates.append((run.records.global_step, model.weight.grad.item())))

    def step_fn(batch):
        factor = 1 + torch.rand(()) if noise else 1.0
        loss = (part.model(batch["x"]) * factor).sum()
        seen.append((run.records.global_step, batch["x"].item(), loss.item()))
        if run.records.global_step == stop_at:
            run.stop.requested = True
        return loss, {}

    try:
        loop.train(run, [part], [torch.tensor([float(x)]) for x in range(1, 11)],
                   lambda items: {"x": torch.stack(items)}, step_fn, run_name="toy")
    finally:
        signal.signal(signal.SIGTERM, previous)
    return seen, updates, model


def test_accumulation_updates_after_micro_batches_3_and_7_and_not_the_tail(tmp_path, monkeypatch):
    # Upstream MiniMind's `(step + 1) % acc == 0` with 1-based steps: 10 micro-batches, acc 4 -> [3, 7].
    assert [s for s in range(1, 11) if loop.is_update_step(s, 4)] == [3, 7]
    assert [s for s in range(1, 13) if loop.is_update_step(s, 4)] == [3, 7, 11]  # PPO's old-actor refresh
    seen, updates, _ = _toy_train(tmp_path, monkeypatch)
    xs = [x for _, x, _ in seen]
    assert [g for g, _ in updates] == [3, 7]
    # Each update applies the micro-batches since the last one, each loss divided by acc (the first
    # window holds 3); micro-batches 8-10 are never applied, as upstream.
    assert [grad for _, grad in updates] == pytest.approx([sum(xs[0:3]) / 4, sum(xs[3:7]) / 4])
    state = torch.load(tmp_path / "toy_resume.pth", weights_only=False)
    assert (state["epoch"], state["step"]) == (0, 7)
    assert state["optimizer"]["state"][0]["step"] == 2


def test_an_epochs_tail_joins_the_next_epochs_first_window(tmp_path, monkeypatch):
    seen, updates, _ = _toy_train(tmp_path, monkeypatch, epochs=2)
    xs = [x for _, x, _ in seen]
    assert [g for g, _ in updates] == [3, 7, 13, 17]  # epoch 2's steps 3 and 7
    # Upstream zeroes gradients only after an update: epoch 1's steps 8-10 count in epoch 2's first update.
    assert [grad for _, grad in updates] == pytest.approx(
        [sum(xs[0:3]) / 4, sum(xs[3:7]) / 4, sum(xs[7:13]) / 4, sum(xs[13:17]) / 4])


def test_a_stop_resumes_at_the_last_boundary_across_an_epoch_end(tmp_path, monkeypatch, capsys):
    """Stopped at epoch 2 step 2, the resume state is epoch 1's boundary at step 7 (with the RNG states of
    that moment): the resumed run re-runs epoch 1's tail and then matches the uninterrupted run exactly."""
    straight, straight_updates, straight_model = _toy_train(tmp_path, monkeypatch, epochs=2, noise=True,
                                                            run_dir="straight")
    with pytest.raises(SystemExit) as stopped:
        _toy_train(tmp_path, monkeypatch, epochs=2, noise=True, stop_at=12)
    assert stopped.value.code == tu.SIGTERM_EXIT
    assert "at epoch 2/2, step 2/10 (resumes after epoch 1 step 7)" in capsys.readouterr().out
    state = torch.load(tmp_path / "toy_resume.pth", weights_only=False)
    assert (state["epoch"], state["step"], state["scheduler"]["global_step"]) == (0, 7, 7)
    resumed, resumed_updates, resumed_model = _toy_train(tmp_path, monkeypatch, epochs=2, noise=True, from_resume=1)
    assert [g for g, _, _ in resumed] == list(range(8, 21))
    assert resumed == straight[7:]  # the same batches, random factors and losses
    assert resumed_updates == straight_updates[2:]
    assert torch.equal(resumed_model.weight, straight_model.weight)
