"""The pieces of the RL trainers (PPO, GRPO, SPO), each a small module of plain functions:

- `rewards`: the reward of a response as a weighted sum of named parts (format, rule, reward model),
  each part kept per response so it can be logged by name.
- `reward_model`: loading and querying a local transformers reward model.
- `rollout`: sampling responses with the KV cache and the log-probabilities the losses need.
- `losses`: advantages and losses of GRPO, SPO and PPO as pure functions over one masked mean.
- `step_metrics`: what an RL step records beyond its loss (reward parts, KL, truncation, rollout rows).

What the three scripts build with the training loop (inputs checked, policy, reference, prompts) is
`trainer.rl_setup`: this package imports nothing of the trainer but `trainer.rules`.

Shapes: B = responses in the batch, R = completion tokens. Log-probabilities are per token, [B, R];
masks are 0/1 tensors of the same shape that keep a response's tokens up to and including its first
end-of-sequence token.
"""
