#!/usr/bin/env bash
# The figures only a GPU can give, measured on a lent GPU in parts that each fit one device call (10 minutes;
# 30 minutes of device time in all), most valuable first. Everything is decided here, not there.
#
#   bash scripts/gpu-session.sh prepare          # here, at a clean commit: the corpora and the commit -> gpu_data/
#   bash scripts/gpu-session.sh --list           # the parts in order, each with its steps' time limits
#   bash scripts/gpu-session.sh PART [PART...]   # on the device machine, carry ["gpu_data"]: one call per part
#   bash scripts/gpu-session.sh all              # every part in order (where one call may run that long)
#   bash scripts/gpu-session.sh --cpu all        # here: every step end to end on the CPU with tiny settings
#
# Back here: unpack each part's results-PART.tar.gz (from $OUT) in the repository root, check, commit.
#
# On the device machine python3 holds a CUDA build of PyTorch and vaswani runs from src/ (nothing installed).
# Results name the commit in gpu_data/COMMIT (VASWANI_GIT_COMMIT, which provenance.py prefers to any checkout).
# Each part writes its log and one tar.gz of the result folders it made to $OUT (the tool brings back 8 files).
# --cpu writes everything under $OUT (default: a new temporary folder) and leaves the repository untouched; the
# test suite runs it, so a step whose command or settings no longer exist fails here, not on a lent GPU.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cpu=
if [ "${1:-}" = --cpu ]; then cpu=1; shift; fi
data=$repo/gpu_data

if [ "${1:-}" = prepare ]; then
  cd "$repo" || exit 1
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

# ---- sizes: a GPU's, or tiny ones that run every step on a CPU in about a minute -------------------------------
if [ -n "$cpu" ]; then
  device=cpu tag=cpu
  out=${OUT:-$(mktemp -d)}
  work=$out/work  # results, runs and caches of a CPU run stay out of the repository
  corpora=${VASWANI_DATA:-$repo/../shared/data}
  gpu_tests=("$repo/tests/gpu")  # skipped without a GPU: this proves they still collect
  # Pairs of at most 15 tokens of a 300-token vocabulary: a few hundred training pairs, a few dozen to validate on.
  tiny_data=(--set data.vocab_size=300 --set data.max_len=16 --set train.max_tokens=400 --set train.bleu_subset=0)
  short_run=(--preset smoke "${tiny_data[@]}" --set train.progress=false --set train.max_steps=2)
  full_run=(--preset smoke "${tiny_data[@]}" --set train.progress=false --set train.max_steps=2
    --set train.final_model=true --set train.final_beam=2 --set train.final_alphas=0.6
    --set train.final_valid_sentences=4 --set train.average_last=2)
  bench_train=(--preset tiny --set model.vocab_size=300 --peer torch --batches fixed --precision fp32
    --max-tokens 256 --steps 1 --warmup 1 --repeats 1)
  bench_train_compiled=("${bench_train[@]}" --length-buckets 2 --compile)
  bench_decode=(--preset tiny --sentences 4 --batch-size 4 --beams 2 --output-len 6 --uncached-sentences 2
    --single-sentences 2 --repeats 1)
  attention=(--smoke --lengths 16 --batch-sizes 1 --d-model 16 --heads 2 --windows 4 --window-length 48
    --model-lengths 8 --train-steps 0)
  study=(--smoke)
else
  device=cuda tag=gpu
  out=${OUT:-$repo/gpu-out}
  work=$repo
  corpora=$data
  commit=$(cat "$data/COMMIT" 2>/dev/null)
  gpu_tests=()
  # The 400 updates the evidence profiled (0.57 min without cuDNN attention, 1.48 min with it): now with the
  # attention kernels the model chooses (model/kernels.py, sdpa_backends).
  short_run=(--preset multi30k-gpu --set train.progress=false --set train.max_steps=400
    --set train.final_model=false --set train.bleu_subset=0 --set train.log_every_steps=10)
  # The preset as a user runs it: 6 minutes of training, then the final model (averaging, the search, test2016
  # and test2017) in at most 1.5 minutes.
  full_run=(--preset multi30k-gpu --set train.progress=false)
  # The MFU target: bf16, 32k-token Multi30k batches in 5 length buckets replayed as CUDA graphs, against
  # torch.nn.Transformer and MarianMT on the same batches in the same run; then ours compiled as well.
  bench_train=(--preset base --set model.vocab_size=8000 --peer torch marian --batches multi30k --length-buckets 5
    --cuda-graphs --precision bf16 --max-tokens 32768 --steps 10 --warmup 3 --repeats 5)
  bench_train_compiled=(--preset base --set model.vocab_size=8000 --peer torch --batches multi30k
    --length-buckets 3 --compile --cuda-graphs --precision bf16 --max-tokens 32768 --steps 10 --warmup 3
    --repeats 5)
  bench_decode=(--preset small --compile)
  attention=(--lengths 128 512 1024 2048 4096 --batch-sizes 1 8 --windows 16 32 64 128 256 512 --train-steps 100
    --train-preset multi30k-ablation)
  study=()
fi

# ---- the parts, most valuable first: one line per step (part, time limit in seconds, command). A new step, or a
# new part, is one more line here; what a part brings back besides its log is listed in made() below.
steps() {
  step tests 120 python3 -m pytest -q -rs -m gpu -p no:cacheprovider "${gpu_tests[@]}"
  # The rest of the suite on the GPU (the device fixture), not the server and export, whose packages the GPU image
  # lacks and whose code has no GPU path.
  gpu_step tests 300 python3 -m pytest -q -n 8 --maxfail=10 -p no:cacheprovider --ignore=tests/serve \
    --ignore=tests/export -m "not gpu"
  step bench 120 vaswani train "${short_run[@]}" --run-dir runs/short --set train.device=$device
  step bench 240 vaswani bench train "${bench_train[@]}" --device $device --out results/bench/train-base-$tag.json
  step bench 90 vaswani bench decode "${bench_decode[@]}" --device $device --out results/bench/decode-small-$tag.json
  step train 540 vaswani train "${full_run[@]}" --run-dir runs/multi30k-$tag --set train.device=$device
  step train 20 vaswani experiment final-models --runs runs/multi30k-$tag --device $device \
    --out results/multi30k-$tag
  step studies 210 vaswani experiment attention "${attention[@]}" --device $device --out results/attention-$tag
  step studies 60 vaswani experiment memory "${study[@]}" --device $device --out results/memory-$tag
  step studies 60 vaswani experiment devices "${study[@]}" --device $device --out results/devices-$tag
  step compiled 480 vaswani bench train "${bench_train_compiled[@]}" --device $device \
    --out results/bench/train-base-compiled-$tag.json
}
# What each part brings back, besides its log: result folders and files, and run logs (no weights).
made() {
  case "$1" in
  tests) ;;
  bench) echo "results/bench/train-base-$tag.json results/bench/train-base-$tag.md
    results/bench/decode-small-$tag.json results/bench/decode-small-$tag.md
    runs/short/metrics.jsonl
    runs/short/summary.json" ;;
  studies) echo "results/attention-$tag results/memory-$tag results/devices-$tag" ;;
  compiled) echo "results/bench/train-base-compiled-$tag.json results/bench/train-base-compiled-$tag.md" ;;
  train) echo "results/multi30k-$tag runs/multi30k-$tag/metrics.jsonl runs/multi30k-$tag/summary.json
    runs/multi30k-$tag/config.yaml" ;;
  esac
}

# ---- running them -----------------------------------------------------------------------------------------------
parts=()
listing=  # "table": print each step; "names": print each step's part
step() {  # step PART SECONDS COMMAND...: run COMMAND under a time limit when PART is asked for
  local part=$1 limit=$2
  shift 2
  case "$listing" in
  table) printf '%-8s %4ss  %s\n' "$part" "$limit" "$*"; return 0 ;;
  names) echo "$part"; return 0 ;;
  esac
  [[ " ${parts[*]} " == *" $part "* ]] || return 0
  if [ "$1" = vaswani ]; then  # `timeout` runs programs, not shell functions: the CLI as a module
    shift
    set -- python3 -m vaswani "$@"
  fi
  echo "::: $(date -u +%T) $*"
  local start=$SECONDS
  timeout "$limit" "$@"
  local status=$?
  echo "::: exit $status after $((SECONDS - start)) s (limit ${limit} s): $*"
  [ "$status" -eq 0 ] || failed+=("$part: $*")
}
gpu_step() {  # a step that only a GPU run takes
  if [ -n "$cpu" ] && [ -z "$listing" ]; then
    [[ " ${parts[*]} " == *" $1 "* ]] && echo "::: skipped on the CPU: ${*:3}"
    return 0
  fi
  step "$@"
}
known=($(listing=names steps | uniq))

if [ "${1:-}" = --list ]; then
  listing=table steps
  exit 0
fi
if [ $# -eq 0 ]; then
  echo "usage: bash scripts/gpu-session.sh [--cpu] prepare|--list|all|PART... (parts: ${known[*]})" >&2
  exit 2
fi
for part in "$@"; do
  if [ "$part" = all ]; then
    parts+=("${known[@]}")
  elif [[ " ${known[*]} " == *" $part "* ]]; then
    parts+=("$part")
  else
    echo "usage: bash scripts/gpu-session.sh [--cpu] prepare|--list|all|PART... (parts: ${known[*]})" >&2
    exit 2
  fi
done
if [ -z "$cpu" ] && [ ! -f "$data/COMMIT" ]; then
  echo "gpu-session: no gpu_data/COMMIT: run 'bash scripts/gpu-session.sh prepare' here and carry gpu_data" >&2
  exit 1
fi

mkdir -p "$out" "$work" || exit 1
cd "$work" || exit 1
export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}" VASWANI_DATA="$corpora" VASWANI_CACHE="$work/.cache"
export PYTHONUNBUFFERED=1
# On the device machine the copy of the tree may sit in no checkout, or in another one: the commit comes from
# prepare. On the CPU the results name this checkout's commit, and whether it had uncommitted changes.
if [ -z "$cpu" ]; then export VASWANI_GIT_COMMIT="$commit"; fi
log=$out/$(IFS=-; echo "${parts[*]}").log
exec > >(tee "$log") 2>&1
if [ -z "$cpu" ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
fi
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'device:',
torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')"

failed=()
steps
for part in "${parts[@]}"; do
  present=()
  for path in $(made "$part"); do [ -e "$path" ] && present+=("$path"); done
  if [ ${#present[@]} -gt 0 ]; then
    tar czf "$out/results-$part.tar.gz" "${present[@]}"
    echo "packed into results-$part.tar.gz: ${present[*]}"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'gpu-session: %s step(s) failed:\n' "${#failed[@]}"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "gpu-session: every step of ${parts[*]} ended well"
