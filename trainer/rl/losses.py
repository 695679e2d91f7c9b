"""Advantages and losses of GRPO, SPO and PPO: small pure functions over one masked mean.

Inputs are per-token log-probabilities [B, R] of the policy (`logps`, with gradient) and of the
frozen reference (`ref_logps`), the completion mask [B, R] and per-response rewards or advantages [B].
"""
import torch
import torch.nn.functional as F


def masked_mean(values, mask, dim=None):
    """Mean of `values` over the tokens where `mask` is 1: over all of them (`dim=None`), or per row
    (`dim=1`, one mean per response; an empty row gives 0)."""
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim=dim) / mask.sum(dim=dim).clamp(min=1)


def k3_kl(logps, ref_logps):
    """Per-token k3 estimate of KL(policy || reference): exp(ref - logp) - (ref - logp) - 1 (never negative)."""
    delta = ref_logps - logps
    return torch.exp(delta) - delta - 1


# --------------------------------------------------------------------------------------------------
# GRPO


def group_advantages(rewards, group_size, eps=1e-4, limit=10.0, batch_eps=1e-8):
    """GRPO advantages, as upstream MiniMind: each reward normalised within its group of `group_size`
    samples of one prompt, (r - mean) / (std + eps) with the unbiased std, clamped to +-`limit`, then
    normalised again over the whole batch, (a - mean) / (std + batch_eps).

    Returns (advantages, group std). A batch with a single response has no batch std: its advantage is 0.
    """
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1).repeat_interleave(group_size)
    std = grouped.std(dim=1).repeat_interleave(group_size)
    advantages = ((rewards - mean) / (std + eps)).clamp(-limit, limit)
    if advantages.numel() < 2:
        return torch.zeros_like(advantages), std
    return (advantages - advantages.mean()) / (advantages.std() + batch_eps), std


def grpo_loss(logps, ref_logps, advantages, mask, beta):
    """GRPO loss (TRL's single-update form): -(ratio * A - beta * KL) per token, where ratio is
    exp(logp - logp.detach()) = 1 whose gradient is the policy gradient; mean over each response,
    then over responses. Returns (loss, mean per-token KL)."""
    kl = k3_kl(logps, ref_logps)
    ratio = torch.exp(logps - logps.detach())
    per_token = -(ratio * advantages.unsqueeze(1) - beta * kl)
    return masked_mean(per_token, mask, dim=1).mean(), masked_mean(kl.detach(), mask)


# --------------------------------------------------------------------------------------------------
# SPO


class ValueTracker:
    """SPO's adaptive baseline: a Beta(alpha, beta) belief about the normalised reward in [0, 1].

    Rewards are normalised over the range the run's rewards can really take, [low, high]
    (`rewards.reward_range`: e.g. [-3, 4.5] with format rewards and a reward model), so the baseline
    can reach the top reward. Each update decays the old evidence by rho and adds the batch's mean
    normalised reward. rho comes from how far the policy moved (the change in mean token log-prob, d):
    rho = 2^(-d / d_half), clipped to [rho_min, rho_max]; a policy that moves fast forgets old rewards fast.
    """

    def __init__(self, low, high, d_half=0.06, rho_min=0.5, rho_max=0.96, rho_first=0.9):
        if not high > low:
            raise ValueError(f"the reward range needs high > low, got [{low}, {high}]")
        self.low, self.high = float(low), float(high)
        self.d_half, self.rho_min, self.rho_max, self.rho_first = d_half, rho_min, rho_max, rho_first
        prior = 1.0 / (1.0 - rho_min)  # the evidence a stream of updates at the slowest decay settles to
        self.alpha = 0.5 * prior
        self.beta = 0.5 * prior
        self.old_mean_logp = None

    def baseline(self):
        """Expected normalised reward, in [0, 1]."""
        return self.alpha / (self.alpha + self.beta)

    def baseline_reward(self):
        """The baseline mapped back to the reward scale ([low, high])."""
        return self.low + self.baseline() * (self.high - self.low)

    def normalise(self, rewards):
        """Rewards mapped from [low, high] to [0, 1] (clamped, so alpha and beta stay positive)."""
        return ((rewards - self.low) / (self.high - self.low)).clamp(0.0, 1.0)

    def rho(self, mean_logp):
        """Decay for a policy whose mean token log-prob is now `mean_logp`."""
        if self.old_mean_logp is None:
            return self.rho_first
        rho = 2 ** (-abs(self.old_mean_logp - mean_logp) / self.d_half)
        return max(min(rho, self.rho_max), self.rho_min)

    def update(self, mean_normalised_reward, mean_logp):
        """Fold in one batch: its mean normalised reward (see `normalise`) and the policy's mean token
        log-prob on it. Returns the rho used."""
        rho = self.rho(mean_logp)
        self.old_mean_logp = mean_logp
        avg = float(mean_normalised_reward)
        self.alpha = rho * self.alpha + avg
        self.beta = rho * self.beta + (1 - avg)
        return rho

    def state_dict(self):
        return {"alpha": self.alpha, "beta": self.beta, "old_mean_logp": self.old_mean_logp}

    def load_state_dict(self, state):
        self.alpha, self.beta, self.old_mean_logp = state["alpha"], state["beta"], state["old_mean_logp"]


def spo_advantages(rewards, baseline_reward, limit=5.0):
    """SPO advantage: reward minus the tracker's baseline (on the reward scale), clamped to +-limit."""
    return (rewards - baseline_reward).clamp(-limit, limit)


def spo_loss(logps, ref_logps, advantages, mask, beta):
    """SPO loss: -logp * A + beta * KL per token, mean over each response, then over responses.
    Returns (loss, mean per-token KL)."""
    kl = k3_kl(logps, ref_logps)
    per_token = -logps * advantages.unsqueeze(1) + beta * kl
    return masked_mean(per_token, mask, dim=1).mean(), masked_mean(kl.detach(), mask)


# --------------------------------------------------------------------------------------------------
# PPO


def last_token_values(values, attention_mask):
    """Each row's value at its last attended position: values [B, T], mask [B, T] -> [B]."""
    positions = torch.arange(attention_mask.size(1), device=attention_mask.device)
    last = (attention_mask.long() * positions).argmax(dim=1)
    return values[torch.arange(values.size(0), device=values.device), last]


def ppo_losses(logp, old_logp, ref_logp, values, rewards, clip_epsilon, vf_coef, kl_coef):
    """PPO on whole responses (as upstream MiniMind): log-probs summed over each response's tokens [B],
    the critic's value at the response end [B], rewards [B].

    advantage = reward - value (detached); policy loss = -mean(min(ratio * A, clip(ratio) * A)) with
    ratio = exp(logp - old_logp); value loss = MSE(value, reward); KL terms are mean log-ratios.
    Returns a dict: loss, policy_loss, value_loss, kl (to the old actor), kl_ref (to the reference).
    """
    advantages = rewards - values.detach()
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.min(ratio * advantages, ratio.clamp(1 - clip_epsilon, 1 + clip_epsilon) * advantages)
    policy_loss = -surrogate.mean()
    value_loss = F.mse_loss(values, rewards)
    kl = (logp - old_logp).mean()
    kl_ref = (logp - ref_logp).mean()
    loss = policy_loss + vf_coef * value_loss + kl_coef * kl_ref
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "kl": kl, "kl_ref": kl_ref}
