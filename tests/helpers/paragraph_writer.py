"""``make demo`` on a tiny model that writes as SmolLM2's detailed writer did in the demo: it
never ends an answer on its own (no end-of-text token), but it does break paragraphs.

Why a bias and not the plain tiny model: tiny-llama's random weights draw its end token often
enough (about one completion in five ends within 64 tokens) that the demo's old config, whose
detailed writer SmolLM2 never ended within its budget, ran quiet on it too. Here the special
tokens' logits are pushed down by ``NO_END`` (never drawn) and the newline's up by
``NEWLINE``, so only a stop string ends an answer. The newline's bias is set where a blank line
(two newlines in a row) ends some but not all completions within the demo's budgets (the 3
steps: 1 to 5 in 8 cut per agent and step) and the answers still vary in reward: at +3 most
end within a few tokens, under the reward's 8-word floor, every group's rewards are equal and
the watch says so; at +2 some steps cut all 8 of an agent's completions.

Run as a script (what the test does, in a fresh process: the demo sets
``warnings.formatwarning`` and prints its warnings to stderr as the user sees them):

    python tests/helpers/paragraph_writer.py key=value ...   # the demo's overrides
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

NO_END = -30.0  # added to every special token's logit: exp(-30) ~ 1e-13
NEWLINE = 2.5  # added to the newline's logit (see above)


def write_paragraphs(model: torch.nn.Module, tokenizer) -> None:
    """Bias ``model``'s output logits (a forward hook on its output head, so sampling, greedy
    decoding and the update's log-probs all see the same model)."""
    head = model.get_output_embeddings()
    bias = torch.zeros(head.out_features)
    bias[list(tokenizer.all_special_ids)] = NO_END
    (newline,) = tokenizer.encode("\n", add_special_tokens=False)
    bias[newline] = NEWLINE

    def hook(module, inputs, logits):
        return logits + bias.to(logits.device, logits.dtype)

    head.register_forward_hook(hook)


def main(argv: list[str]) -> int:
    """The demo (``teamrl.commands.quickstart.main``) with every model of its team biased."""
    from teamrl.commands import quickstart
    from teamrl.team.models import load_tokenizer
    from teamrl.trainer import Trainer

    class ParagraphTrainer(Trainer):
        def __init__(self, cfg, *args, **kwargs):
            super().__init__(cfg, *args, **kwargs)
            tokenizer = load_tokenizer(cfg.model.name_or_path)
            models = {id(p.model): p.model for p in self.team.policies.values()}
            for model in models.values():  # under LoRA every policy shares the base
                write_paragraphs(model, tokenizer)

    # quickstart.main imports the Trainer when it runs: it finds this one
    sys.modules["teamrl.trainer"].Trainer = ParagraphTrainer
    return quickstart.main(argv)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: teamrl
    sys.exit(main(sys.argv[1:]))
