#!/usr/bin/env bash
# Build the separate venv in which benchmarks/comlrl_worker.py runs CoMLRL 1.4.3.
#
#   benchmarks/setup_comlrl.sh [VENV_DIR]      (default: benchmarks/.venv-comlrl, gitignored)
#
# CoMLRL never goes into the main .venv: it drags in wandb/openai and its own transformers
# range, and teamrl must not import it. Re-running is cheap: a stamp file records the pins,
# and the script does nothing when the venv already holds exactly them.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-$here/.venv-comlrl}"

# torch first and pinned: 2.13.0 is the CPU wheel in the local wheel folder; any other version
# would pull a multi-GB CUDA build, and installing comlrl first would let pip pick one.
TORCH="torch==2.13.0"
COMLRL="comlrl==1.4.3"
# comlrl 1.4.3 asks only for transformers>=4.30 and an unpinned datasets. The newest releases
# available here, transformers 5.23.0 and datasets 5.2.0, run its MAGRPOTrainer end to end
# (from_pretrained with its torch_dtype/sdpa kwargs, generate with forwarded kwargs, the loss),
# and they are the versions teamrl's own .venv uses, so both sides share tokenizer and
# model code. Pinned so that a later release cannot silently change what is measured.
TRANSFORMERS="transformers==5.23.0"
DATASETS="datasets==5.2.0"
PINS="$TORCH $COMLRL $TRANSFORMERS $DATASETS"

stamp="$venv/.teamrl-comlrl-pins"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$PINS" ]] &&
    "$venv/bin/python" -c "import comlrl.trainers.reinforce, torch, transformers" 2>/dev/null; then
    echo "comlrl venv ready: $venv ($PINS)"
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet)
"${pip[@]}" "$TORCH"
# Repeat the torch pin so that resolving comlrl's dependencies can never replace it.
"${pip[@]}" "$TORCH" "$COMLRL" "$TRANSFORMERS" "$DATASETS"

"$venv/bin/python" - <<'EOF'
from importlib import metadata

import comlrl.trainers.reinforce  # noqa: F401  (fails here, not in the benchmark)

for name in ("comlrl", "torch", "transformers", "datasets"):
    print(f"  {name} {metadata.version(name)}")
EOF
echo "$PINS" >"$stamp"
echo "comlrl venv ready: $venv"
