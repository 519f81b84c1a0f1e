"""Credit: from a rollout's rewards to each sample's advantage. Group baselines
(``advantages``, ``filtering``) and learned critics (``critics``, ``critic_credit``, ``gae``)."""
