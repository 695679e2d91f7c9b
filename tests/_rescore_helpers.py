"""A run's records written by the trainers' own writers and scored by the trainers' own reward functions,
without a training run: the store a rescore reads (tests of mmcore.runs.rescore and the acts table)."""
from trainer.rules.records import RunRecords

#: (prompt, reference) pairs and responses of each kind: right, wrong, well-formed and not.
PROMPTS = [("<|im_start|>user\n3+5=?<|im_end|>\n<|im_start|>assistant\n", "8"),
           ("<|im_start|>user\n9-4=?<|im_end|>\n<|im_start|>assistant\n", "5")]
RESPONSES = ["<think>\nadd\n</think>\n<answer>\n8\n</answer>", "<think>\nhm\n</think>\n<answer>\n5\n</answer>",
             "<answer>8</answer>", "8", "<think>\nno end", "<think>\nx\n</think>\n\n<answer>\n 5 \n</answer>",
             "a long reply " * 7, ""]


def write_run(run_dir, steps=3, reasoning=1, group_size=4):
    """Records of `steps` GRPO-like steps: metrics and stored responses, rewards from trainer.rl.rewards."""
    from trainer.rl import losses, rewards
    functions = rewards.reward_functions(reasoning)
    records = RunRecords(run_dir, "grpo", rollouts=True, meta={"group_size": group_size, "reasoning": reasoning})
    for step in range(1, steps + 1):
        prompts, references, responses = [], [], []
        for g, (prompt, reference) in enumerate(PROMPTS):
            for i in range(group_size):
                prompts.append(prompt)
                references.append(reference)
                responses.append(RESPONSES[(step * 3 + g * group_size + i) % len(RESPONSES)])
        total, parts = rewards.score(functions, prompts, responses, references)
        advantages, _ = losses.group_advantages(total, group_size)
        groups = [[{"prompt": prompts[k], "reference": references[k], "response": responses[k],
                    "reward": float(total[k]), "advantage": float(advantages[k]), "length": len(responses[k]) + 1, "truncated": False,
                    "parts": {name: float(values[k]) for name, values in parts.items()}}
                   for k in range(g * group_size, (g + 1) * group_size)] for g in range(len(PROMPTS))]
        records.add_rollouts(step, 0, groups)
        records.log(step, 0, step, {"loss": 0.1, "reward": float(total.mean())}, step * 8, step * 100)
    records.close()
    return run_dir


def length_reward(prompts, responses, references):
    """A reward that pays for length alone (an admin-trusted function in the tests)."""
    return [len(r) / 100 for r in responses]
