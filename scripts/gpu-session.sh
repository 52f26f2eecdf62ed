#!/usr/bin/env bash
# Every figure issue #17 asks of a lent GPU, in parts that each fit one device call (10 minutes), most valuable
# first. A GPU is lent to few sessions and for 30 minutes of device time: everything is decided here, not there.
#
#   bash scripts/gpu-session.sh prepare     # here, on the CPU machine, at a clean commit: data + commit -> gpu_data/
#   # then one device call per part, each with carry ["gpu_data"]:
#   bash scripts/gpu-session.sh tests       # -m gpu tests, then the suite on the GPU; a short multi30k-gpu run
#   bash scripts/gpu-session.sh bench       # bench train --preset base bf16/fp32 vs torch.nn.Transformer and
#                                           #   MarianMT, MFU, torch.compile; bench decode on the GPU
#   bash scripts/gpu-session.sh studies     # experiment attention (to 4096), memory, devices
#   bash scripts/gpu-session.sh train       # multi30k-gpu to convergence inside ~8 minutes + its final model
#   # back here: tar xzf <files_at>/results-PART.tar.gz, check, commit the results with the device's name.
#
# On the device machine python3 holds a CUDA build of PyTorch; vaswani runs from src/ (nothing is installed). The
# machine has no .git: results take their commit from gpu_data/COMMIT (VASWANI_GIT_COMMIT, see provenance.py).
# Each part writes its log and one tar.gz of the result folders it made to $OUT (the tool brings back 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:-}
data=gpu_data

if [ "$part" = prepare ]; then
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "gpu-session: commit first: the results must name a commit, and the tree has uncommitted changes" >&2
    exit 1
  fi
  source_data=${VASWANI_DATA:-../shared/data}
  if [ ! -d "$source_data/multi30k" ]; then
    echo "gpu-session: no $source_data/multi30k; set VASWANI_DATA to the folder holding the corpora" >&2
    exit 1
  fi
  rm -rf "$data" && mkdir -p "$data" && cp -r "$source_data/multi30k" "$data/"
  git rev-parse HEAD >"$data/COMMIT"
  echo "gpu_data/ holds multi30k and COMMIT $(cat "$data/COMMIT"); pass carry [\"gpu_data\"] with every part"
  exit 0
fi

case "$part" in tests | bench | studies | train) ;; *)
  echo "usage: bash scripts/gpu-session.sh prepare|tests|bench|studies|train" >&2
  exit 2 ;;
esac
if [ ! -f "$data/COMMIT" ]; then
  echo "gpu-session: no $data/COMMIT: run 'bash scripts/gpu-session.sh prepare' here and carry gpu_data" >&2
  exit 1
fi
out=${OUT:-gpu-out}
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" VASWANI_DATA="$PWD/$data" VASWANI_CACHE="$PWD/.cache"
export VASWANI_GIT_COMMIT="$(cat "$data/COMMIT")" PYTHONUNBUFFERED=1
exec > >(tee "$out/$part.log") 2>&1
vaswani() { python3 -m vaswani "$@"; }
made=()  # result folders and files this part wrote, packed into $out/results-$part.tar.gz at the end
step() {  # step SECONDS COMMAND...: run one command under a time limit and say how it ended
  local limit=$1; shift
  echo "::: $(date -u +%T) $*"
  timeout "$limit" "$@"
  echo "::: exit $? after at most ${limit}s: $*"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda,
torch.cuda.get_device_name(), 'transformers', transformers.__version__)"

case "$part" in
tests)
  step 150 python3 -m pytest -q -rs -m gpu -p no:cacheprovider
  # The rest of the suite runs on the GPU through the device fixture. Not here: the server (fastapi, a browser)
  # and the export (ctranslate2), whose packages the GPU image lacks and whose code has no GPU path.
  step 330 python3 -m pytest -q --maxfail=10 -p no:cacheprovider --ignore=tests/serve --ignore=tests/export -m "not gpu"
  step 90 vaswani train --preset multi30k-gpu --run-dir runs/gpu-short --set train.max_steps=150 \
    --set train.final_model=false --set train.bleu_subset=0 --set train.log_every_steps=10 \
    --set train.progress=false
  cp runs/gpu-short/metrics.jsonl "$out/gpu-short-metrics.jsonl" 2>/dev/null
  ;;
bench)
  step 240 vaswani bench train --preset base --set model.vocab_size=8000 --peer torch marian \
    --batches fixed multi30k --precision bf16 fp32 --max-tokens 8192 --steps 10 --warmup 3 --repeats 5 \
    --out results/bench/train-base-gpu.json
  step 200 vaswani bench train --preset base --set model.vocab_size=8000 --speedups --batches multi30k \
    --precision bf16 --max-tokens 8192 --steps 10 --warmup 3 --repeats 3 --out results/bench/train-base-gpu-speedups.json
  step 120 vaswani bench decode --preset small --compile --out results/bench/decode-small-gpu.json
  made+=(results/bench/train-base-gpu.json results/bench/train-base-gpu.md results/bench/train-base-gpu-speedups.json
    results/bench/train-base-gpu-speedups.md results/bench/decode-small-gpu.json results/bench/decode-small-gpu.md)
  ;;
studies)
  step 300 vaswani experiment attention --lengths 128 256 512 1024 2048 4096 --train-steps 300 \
    --train-preset multi30k-ablation --out results/attention-gpu
  step 120 vaswani experiment memory --out results/memory-gpu
  step 120 vaswani experiment devices --out results/devices-gpu
  made+=(results/attention-gpu results/memory-gpu results/devices-gpu)
  ;;
train)
  step 520 vaswani train --preset multi30k-gpu --run-dir runs/multi30k-gpu --set train.max_minutes=7 \
    --set train.progress=false
  step 60 vaswani experiment final-models --runs runs/multi30k-gpu --out results/multi30k-gpu
  tar czf "$out/run-multi30k-gpu.tar.gz" --exclude='*.safetensors' --exclude='*.pt' runs/multi30k-gpu 2>/dev/null
  made+=(results/multi30k-gpu)
  ;;
esac

present=()
for path in "${made[@]}"; do [ -e "$path" ] && present+=("$path"); done
if [ ${#present[@]} -gt 0 ]; then
  tar czf "$out/results-$part.tar.gz" "${present[@]}"
  echo "packed into results-$part.tar.gz: ${present[*]}"
fi
