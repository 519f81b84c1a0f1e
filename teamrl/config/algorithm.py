"""The ``algorithm`` section of the config: which algorithm, its groups and baselines, the
critics, the clipped objective and its importance sampling, the KL to the reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from teamrl.config.fields import _f


@dataclass
class AlgorithmConfig:
    name: Literal["magrpo", "at_grpo", "grpo", "app"] = _f(
        "magrpo",
        "Rollout shape and grouping. 'magrpo': simultaneous joint tree, groups (problem, node, agent). "
        "'at_grpo': sequential agent-turn tree, K branches per (turn, agent), groups (problem, turn, agent). "
        "'grpo': K independent episodes per problem, groups (problem). "
        "'app': K episodes per problem of an app task calling the team's OpenAI-compatible "
        "endpoint, grouped as app_groups says (docs/apps.md).",
    )
    app_groups: Literal["call", "episode", "joint"] = _f(
        "call",
        "algorithm.name=app: how the K episodes' calls are grouped. 'call': per (problem, agent, "
        "the agent's k-th call), each call's return its episode's alpha * team + local reward "
        "(the agent-turn groups of AT-GRPO, without branching). 'episode': per problem, every "
        "call's return its episode's team reward, the baseline over episodes (trajectory GRPO). "
        "'joint': MAGRPO's aligned joint groups, for an app that makes exactly one call per "
        "agent per episode.",
    )
    num_generations: int = _f(
        4, "G (MAGRPO) or K (AT-GRPO, GRPO): samples per group. Must be >= 2."
    )
    joint_mode: Literal["aligned", "cross"] = _f(
        "aligned",
        "'aligned': G joint actions per node (j-th sample of every agent); 'cross': the "
        "Cartesian product G^N, each completion credited with the marginal mean return.",
    )
    discount: float | None = _f(
        None,
        "gamma. None = the algorithm's default. 'magrpo': R = r + gamma * mean(R of the child "
        "node's joint actions); default 1.0 (CoMLRL 1.4.3 is undiscounted). 'at_grpo': default "
        "None = each sample's return is its own reward; a number turns it into the return-to-go "
        "of the same agent along the chosen path, r + gamma * R_next. That term is constant "
        "within a group, so it changes advantages only with scale_rewards='batch' (a rescale) "
        "or with baseline='raw' and scale_rewards='none'. 'grpo': unused (a sample carries its "
        "episode's undiscounted total reward).",
    )
    early_termination_threshold: float | None = _f(
        None,
        "Stop expanding a node whose mean joint reward exceeds this. None = never stop early.",
    )
    baseline: Literal["mean", "rloo", "max", "raw", "counterfactual"] = _f(
        "mean",
        "Group baseline: 'mean' (MAGRPO), 'rloo' (MA-RLOO), 'max' (MA-ReMax), 'raw' "
        "(MA-REINFORCE, no baseline), 'counterfactual' (COMA: the return minus the mean over the "
        "agent's own alternatives with the partners' actions fixed; MAGRPO with "
        "joint_mode='cross' only, where it equals 'mean': docs/algorithms/counterfactual.md).",
    )
    scale_rewards: Literal["group", "batch", "agent", "none"] = _f(
        "group",
        "Std normalisation of advantages, after centring per group: 'group' divides by the "
        "group's std; 'batch' divides by the std of all raw rewards (returns) in the batch, as "
        "TRL does; 'agent' divides by the std of the raw returns of the sample's agent across "
        "the batch (per-agent normalisation); 'none' leaves them unscaled (Dr. GRPO). With a "
        "critic there is no centring: batch and agent only divide by those stds.",
    )
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = _f(
        "dapo",
        "Loss aggregation: 'grpo' sequence-mean of token-means; 'dr_grpo' sum / (n * "
        "max_completion_length); 'dapo' token-mean over the optimizer step; 'bnpo' token-mean "
        "per forward chunk.",
    )
    epsilon: float = _f(0.2, "Lower clip range of the PPO ratio.")
    epsilon_high: float | None = _f(
        None, "Upper clip range, > 0 (None = epsilon); DAPO's clip-higher, TRL's epsilon_high."
    )
    delta: float | None = _f(
        None,
        "Cap on the unclipped ratio, > 1 + epsilon_high (None = off): bounds the loss of a token "
        "with a negative advantage whose ratio has grown (two-sided clipping, INTELLECT-2; TRL's "
        "delta; the idea of dual-clip PPO).",
    )
    importance_sampling_level: Literal["token", "sequence"] = _f(
        "token",
        "PPO ratio per token, or one per sequence, exp(mean_t log ratio) (GSPO, Zheng et al. 2025; TRL's importance_sampling_level).",
    )
    importance_sampling_correction: bool | None = _f(
        None,
        "Reweight each token by the ratio pi_old / q, bounded by importance_sampling_cap, q the "
        "sampler's recorded distribution (truncated IS; TRL's "
        "vllm_importance_sampling_correction). None = on whenever the sampler differs from the "
        "trainer: top_p < 1, top_k > 0 (unless truncated_scoring) or a backend other than 'hf'.",
    )
    importance_sampling_mode: Literal[
        "token_truncate",
        "token_mask",
        "sequence_truncate",
        "sequence_mask",
        "geometric_truncate",
        "geometric_mask",
    ] = _f(
        "token_truncate",
        "IS weight per token ('token_*'), one per sequence: the product of its tokens' ratios "
        "('sequence_*', exact but it falls geometrically with length under top-p: 0.9^48 = "
        "0.0064), or their geometric mean ('geometric_*', length-normalised as in GSPO); "
        "'*_truncate' caps it at importance_sampling_cap, '*_mask' sets it to 0 above the cap "
        "(TRL's vllm_importance_sampling_mode, whose default is sequence_mask). See "
        "docs/algorithms/update.md.",
    )
    importance_sampling_cap: float = _f(
        2.0,
        "C >= 1, the IS weight bound (TRL: vllm_importance_sampling_clip_max, default 3.0).",
    )
    truncated_scoring: bool = _f(
        False,
        "Score log-probs under the sampler's own top-k/top-p truncated, renormalised "
        "distribution, so pi_old equals the sampler's q (no IS correction needed on 'hf').",
    )
    mask_truncated_completions: bool = _f(
        False,
        "Completions cut at max_completion_length (no EOS) contribute no loss (DAPO's overlong "
        "filtering; TRL's mask_truncated_completions). They still count in the advantages.",
    )
    disable_dropout: bool = _f(
        True,
        "Set every dropout probability (LoRA's too) to 0 for rollout, old log-probs and update, "
        "so the ratio compares the same function (TRL's disable_dropout).",
    )
    num_iterations: int = _f(1, "mu: optimisation passes over each batch of samples.")
    selection: Literal["greedy", "sample", "random"] = _f(
        "greedy",
        "AT-GRPO: which of the K branches continues: the best reward, a softmax sample, or "
        "uniform at random (unbiased).",
    )
    selection_temperature: float = _f(1.0, "AT-GRPO: softmax temperature for selection='sample'.")
    group_by: list[str] | None = _f(
        None,
        "AT-GRPO grouping ablation: which of 'turn', 'agent' split a problem's groups. None = "
        "both (the paper's (problem, turn, agent)); [] = problem only; [agent]; [turn].",
    )
    alpha: float = _f(1.0, "AT-GRPO/GRPO/app: an agent's reward is alpha * team + local.")
    reward_per_agent: bool = _f(
        False,
        "MAGRPO: False (the paper) credits every agent of a joint action with the team reward; "
        "True credits each agent with alpha * team + its own Step.local_rewards term, so with "
        "alpha=0 the agents learn independently, each on its own reward, under MAGRPO's joint "
        "sampling and groups (the per-agent reward design MAGRPO argues against).",
    )
    critic: Literal["none", "iac", "maac"] = _f(
        "none",
        "The advantage from a learned critic instead of the group's mean, for magrpo and "
        "at_grpo (docs/algorithms/iac.md, maac.md). 'none': the group baseline. 'iac': "
        "independent actor-critic, one value head per agent on its own policy's last hidden "
        "state, reading its own prompt. 'maac': one centralised value head that reads every "
        "agent's observation at once. Advantages by GAE (discount, lam) on MAGRPO's joint tree "
        "or AT-GRPO's agent-turn tree (its default, no discount: a candidate's own reward "
        "minus the value); needs scale_rewards none|batch|agent (per-group centring would "
        "cancel it).",
    )
    critic_level: Literal["turn", "token"] = _f(
        "turn",
        "Where the critic's GAE runs: 'turn' (one value per state, one advantage per "
        "completion) or 'token' (a value per token, the turn's reward on its last token, one "
        "advantage per token; 'iac' only). The discount applies between turns, lam per step.",
    )
    lam: float = _f(
        1.0,
        "GAE lambda (TRL's PPO name) for critic != 'none': 1 = the return minus the value "
        "(Monte Carlo), 0 = the one-step TD error.",
    )
    cliprange_value: float | None = _f(
        None,
        "Value clipping (TRL's PPO name): the critic's loss takes the larger of its error and "
        "the error of its prediction held within this distance of the value the advantages "
        "used. None = plain squared error.",
    )
    critic_learning_rate: float = _f(
        1e-3,
        "Learning rate of the critics' value heads (AdamW, constant); each trains for "
        "num_iterations passes of train.num_mini_batches steps per trainer step.",
    )
    critic_value_norm: bool = _f(
        False,
        "Value normalisation (MAPPO's): the heads predict values in units of a running mean and "
        "std of the value targets, V = mean + std * head(h), and regress on normalised targets. "
        "A head starting at 0 then values a state at the running mean of the returns from the "
        "second step on, instead of creeping towards returns of any scale at "
        "critic_learning_rate per step (docs/algorithms/iac.md).",
    )
    critic_value_norm_decay: float = _f(
        0.9,
        "Per trainer step decay of the value normalisation's running mean and mean square "
        "(debiased, as Adam's moments): 0 = this step's targets only; near 1 = every step alike.",
    )
    max_staleness: int = _f(
        0,
        "Asynchronous training (TRL's name): the generator samples the next steps' rollouts on "
        "its own copy of the weights while the learner updates, and the learner takes a batch "
        "only if it was sampled at most this many updates ago (stale samples are corrected by "
        "importance sampling against the sampler's log-probs). 0 = synchronous, today's "
        "behaviour. One process only (distributed.backend none, generation.backend hf); holds "
        "a second copy of the models. docs/async.md.",
    )
    filter_groups: bool = _f(
        False, "Drop zero-variance groups from the update (their fraction is always logged)."
    )
    max_resample_rounds: int = _f(
        0,
        "With filter_groups: extra rollouts on new problems until the step has as many non-flat "
        "groups as its first rollout had groups, at most this many (DAPO's dynamic sampling; "
        "logged as filter/resample_rounds). 0 = only drop.",
    )
    beta: float = _f(0.0, "KL coefficient to the reference policy (0 = no reference is loaded).")
    kl_estimator: Literal["k1", "k2", "k3"] = _f(
        "k3",
        "KL to the reference, each pulling pi toward pi_ref. 'k3': (r - log r - 1), r = "
        "pi_ref/pi, in the loss; its gradient is that of KL(ref || pi) (TRL's k3 with "
        "use_bias_correction_kl off; on, see that field). 'k2': "
        "0.5 (log pi - log pi_ref)^2 in the loss, gradient of KL(pi || ref). 'k1': log pi - log "
        "pi_ref as a per-token reward penalty (detached, CoMLRL's form), gradient of "
        "KL(pi || ref); k1 as a plain loss would have zero expected gradient.",
    )
    use_bias_correction_kl: bool = _f(
        False,
        "With kl_estimator='k3': multiply k3 by the (not detached) policy ratio pi / pi_old, so "
        "the term estimates KL(pi || ref) and its gradient is that of KL(pi || ref), not "
        "KL(ref || pi) (TRL's use_bias_correction_kl, from DeepSeek-V3.2).",
    )
