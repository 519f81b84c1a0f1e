"""The shared policy update: the loss (``losses``), importance sampling, micro-batches, the
chosen-token log-probs, the fused LoRA linears and the update loop (``policy``)."""
