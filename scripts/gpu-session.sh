#!/usr/bin/env bash
# The figures only a GPU can give, measured on a lent GPU machine in parts that each fit one device call, most
# valuable first. A machine is lent for 15 minutes in all, its start included, and runs one call for at most 10:
# a session's first call runs `headline` (8 minutes), its second `bench` (4); `suite`, `studies` and `compiled`
# wait for later sessions (docs/gpu.md has the calls). Everything is decided here, not there.
#
#   bash scripts/gpu-session.sh prepare          # here, at a clean commit: the corpora and the commit -> gpu_data/
#   bash scripts/gpu-session.sh --list           # every step: its part, its time limit in seconds, its command
#   bash scripts/gpu-session.sh PART [PART...]   # on the device machine, carry ["gpu_data"]: one call per part
#   bash scripts/gpu-session.sh --cpu PART...    # here: the same steps on the CPU with tiny settings (GPU hidden)
#   bash scripts/gpu-session.sh --cpu all        # here: every part's steps that way, one after the other
#
# Each step leaves what it made in $OUT as soon as it ends (a call stopped by its time limit still brings back the
# steps before): the part's log, streamed; the step outputs named below; and a NAME.tar.gz per `keep` line. Back
# here: unpack the tarballs in the repository root, copy the logs and samples into results/gpu/, check, commit.
#
# On the device machine python3 holds a CUDA build of PyTorch and vaswani runs from src/ (nothing installed).
# Results name the commit in gpu_data/COMMIT (VASWANI_GIT_COMMIT, which provenance.py prefers to any checkout).
# --cpu hides every GPU (CUDA_VISIBLE_DEVICES=), writes everything under $OUT (default: a new temporary folder) and
# leaves the repository untouched; the test suite runs it, so a step whose command or settings no longer exist
# fails here, not on a lent GPU.
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

# ---- sizes: a GPU's, or tiny ones that run every step on a CPU in seconds -------------------------------------
# Both runs of multi30k-gpu leave out of the preset only what the device needs: on the CPU its CUDA graphs and its
# size. If the run with CUDA graphs fails within its first 110 s, the same run without them takes what is left of
# its 310 s, on a shorter clock: the eager fallback's figures instead of none.
eager_fallback=(--set train.cuda_graphs=false --set train.max_minutes=2 --set train.final_max_minutes=0.5)
if [ -n "$cpu" ]; then
  export CUDA_VISIBLE_DEVICES=  # the CPU even on a machine with a GPU: the GPU tests skip, auto means cpu
  # Tiny models: one thread is faster, and far faster where other processes share the cores (idle OpenMP threads
  # spin and fight them: two updates took a minute instead of seconds on 2 busy cores).
  export OMP_NUM_THREADS=1
  device=cpu tag=cpu
  out=${OUT:-$(mktemp -d)}
  work=$out/work  # results, runs and caches of a CPU run stay out of the repository
  corpora=${VASWANI_DATA:-$repo/../shared/data}
  gpu_tests=("$repo/tests/gpu/test_fault_loop_on_cuda.py")  # skipped without a GPU: the step's command is checked
  test_workers=0 suite_workers=0
  # Two updates of a 1+1-layer, 32-wide model on the validation split's pairs (a 300-token BPE trains in a second),
  # evaluated after each; the final model chosen on 4 sentences, no test split.
  headline_run=(--preset multi30k-gpu --set train.progress=false --set train.cuda_graphs=false
    --set train.precision=fp32 --set model.d_model=32 --set model.n_heads=2 --set model.d_ff=64
    --set model.n_encoder_layers=1 --set model.n_decoder_layers=1 --set data.train_split=val
    --set data.vocab_size=300 --set train.max_tokens=800 --set train.bleu_subset=0 --set train.max_steps=2
    --set train.eval_every_steps=1 --set train.final_valid_sentences=4 --set train.final_beam=2
    --set train.final_alphas=0.6 --set train.final_test_splits=)
  bench_train=(--preset tiny --set model.vocab_size=300 --peer torch --batches fixed --precision fp32
    --max-tokens 256 --steps 1 --warmup 1 --repeats 1)
  bench_train_compiled=("${bench_train[@]}" --length-buckets 2 --compile)
  bench_decode=(--preset tiny --sentences 4 --batch-size 4 --beams 2 --output-len 6 --uncached-sentences 2
    --single-sentences 2 --repeats 1)
  suite=("$repo/tests/test_devices.py")
  attention=(--smoke --lengths 16 --batch-sizes 1 --d-model 16 --heads 2 --windows 4 --window-length 48
    --model-lengths 8 --train-steps 0)
  study=(--smoke)
else
  device=cuda tag=gpu
  out=${OUT:-$repo/gpu-out}
  work=$repo
  corpora=$data
  commit=$(cat "$data/COMMIT" 2>/dev/null)
  gpu_tests=("$repo/tests/gpu")
  # The slowest GPU tests compile, record CUDA graphs or spawn processes: side by side they take about a minute.
  test_workers=4 suite_workers=8
  # The preset as a user runs it (no progress bar in a log): training on its clock, the final model, the test scores.
  headline_run=(--preset multi30k-gpu --set train.progress=false)
  # The MFU target: bf16, 32k-token Multi30k batches in 5 length buckets replayed as CUDA graphs, against
  # torch.nn.Transformer and MarianMT on the same batches in the same run; then ours compiled as well.
  bench_train=(--preset base --set model.vocab_size=8000 --peer torch marian --batches multi30k --length-buckets 5
    --cuda-graphs --precision bf16 --max-tokens 32768 --steps 10 --warmup 3 --repeats 3)
  bench_train_compiled=(--preset base --set model.vocab_size=8000 --peer torch --batches multi30k
    --length-buckets 3 --compile --cuda-graphs --precision bf16 --max-tokens 32768 --steps 10 --warmup 3
    --repeats 5)
  bench_decode=(--preset small --compile --repeats 2)
  suite=()  # the whole suite but its GPU tests (run in headline) and its slow ones (CPU-mode runs of this script)
  attention=(--lengths 128 512 1024 2048 4096 --batch-sizes 1 8 --windows 16 32 64 128 256 512 --train-steps 100
    --train-preset multi30k-ablation)
  study=()
fi

# ---- the parts, most valuable first: one line per step (part, time limit in seconds, command), then `keep` for
# what it made. A variable set before `step` holds for that step alone: output= also writes the step's output to
# $OUT/FILE, gpu_samples= samples the GPU every second into $OUT/FILE (where nvidia-smi exists), TORCH_LOGS= is
# torch's own logging. The test suite checks that each part's limits fit its call.
steps() {
  # headline, 8 minutes: the GPU tests, then multi30k-gpu as a user runs it and its results table
  output=gpu-tests-$tag.log step headline 120 python3 -m pytest -v -rfEs --durations=0 -n $test_workers \
    -p no:cacheprovider -m gpu "${gpu_tests[@]}"
  TORCH_LOGS=recompiles,perf_hints gpu_samples=gpu-utilisation-multi30k-$tag.csv step headline 310 \
    vaswani train "${headline_run[@]}" --run-dir runs/multi30k-$tag
  keep multi30k-$tag-run runs/multi30k-$tag/{config.yaml,summary.json,metrics.jsonl,provenance.jsonl} \
    runs/multi30k-$tag/checkpoints/final/selection.json
  TORCH_LOGS=recompiles,perf_hints gpu_samples=gpu-utilisation-multi30k-$tag-eager.csv otherwise headline 200 \
    vaswani train "${headline_run[@]}" "${eager_fallback[@]}" --run-dir runs/multi30k-$tag-eager
  keep multi30k-$tag-eager-run runs/multi30k-$tag-eager/{config.yaml,summary.json,metrics.jsonl,provenance.jsonl} \
    runs/multi30k-$tag-eager/checkpoints/final/selection.json
  finished=runs/multi30k-$tag
  if [ -z "$listing" ] && [ -f runs/multi30k-$tag-eager/summary.json ]; then finished=runs/multi30k-$tag-eager; fi
  step headline 30 vaswani experiment final-models --runs "$finished" --device $device --out results/multi30k-$tag
  keep results-multi30k-$tag results/multi30k-$tag
  # bench, 4 minutes: the training step against its peers (the MFU target), then decoding
  step bench 170 vaswani bench train "${bench_train[@]}" --device $device --out results/bench/train-base-$tag.json
  keep results-bench-train-$tag results/bench/train-base-$tag.json results/bench/train-base-$tag.md
  step bench 55 vaswani bench decode "${bench_decode[@]}" --device $device --out results/bench/decode-small-$tag.json
  keep results-bench-decode-$tag results/bench/decode-small-$tag.json results/bench/decode-small-$tag.md
  # suite, 5 minutes: the rest of the suite on the GPU (the device fixture), not the server and export, whose
  # packages the GPU image lacks and whose code has no GPU path, and not the slow tests
  output=suite-$tag.log step suite 285 python3 -m pytest -v -rfEs -n $suite_workers --maxfail=20 -p no:cacheprovider \
    --ignore=tests/serve --ignore=tests/export -m "not gpu and not slow" "${suite[@]}"
  # studies, 5.5 minutes
  step studies 195 vaswani experiment attention "${attention[@]}" --device $device --out results/attention-$tag
  keep results-attention-$tag results/attention-$tag
  step studies 60 vaswani experiment memory "${study[@]}" --device $device --out results/memory-$tag
  keep results-memory-$tag results/memory-$tag
  step studies 60 vaswani experiment devices "${study[@]}" --device $device --out results/devices-$tag
  keep results-devices-$tag results/devices-$tag
  # compiled, 8 minutes: Inductor compiles every bucket shape anew
  step compiled 465 vaswani bench train "${bench_train_compiled[@]}" --device $device \
    --out results/bench/train-base-compiled-$tag.json
  keep results-bench-compiled-$tag results/bench/train-base-compiled-$tag.json \
    results/bench/train-base-compiled-$tag.md
}

# ---- running them -----------------------------------------------------------------------------------------------
parts=()
listing=  # "table": print each step; "names": print each step's part
last_ran=0 last_status=0 last_seconds=0 last_limit=0  # the step before
step() {  # step PART SECONDS COMMAND...: run COMMAND under a time limit when PART is asked for
  local part=$1 limit=$2
  shift 2
  case "$listing" in
  table) printf '%-8s %4ss  %s\n' "$part" "$limit" "$*"; last_limit=$limit; return 0 ;;
  names) echo "$part"; return 0 ;;
  esac
  last_ran=0
  [[ " ${parts[*]} " == *" $part "* ]] || return 0
  if [ "$1" = vaswani ]; then  # `timeout` runs programs, not shell functions: the CLI as a module
    shift
    set -- python3 -m vaswani "$@"
  fi
  local sampler=
  if [ -n "${gpu_samples:-}" ] && command -v nvidia-smi >/dev/null; then
    echo "timestamp, utilization.gpu [%], utilization.memory [%], memory.used [MiB], power.draw [W]" \
      >"$out/$gpu_samples"
    nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used,power.draw \
      --format=csv,noheader,nounits -l 1 >>"$out/$gpu_samples" 2>/dev/null &
    sampler=$!
  fi
  echo "::: $(date -u +%T) $*"
  local start=$SECONDS status
  if [ -n "${output:-}" ]; then
    timeout -k 15 "$limit" "$@" 2>&1 | tee "$out/$output"
    status=${PIPESTATUS[0]}
  else
    timeout -k 15 "$limit" "$@"  # SIGTERM at the limit (a training run saves and stops), SIGKILL 15 s later
    status=$?
  fi
  last_ran=1 last_status=$status last_seconds=$((SECONDS - start)) last_limit=$limit
  echo "::: exit $status after $last_seconds s (limit ${limit} s): $*"
  if [ -n "$sampler" ]; then
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    awk -F', *' 'NR > 1 && $2 ~ /^[0-9]+$/ {n++; sum += $2; if ($2 >= 50) busy++; if ($4 > peak) peak = $4}
      END {if (n) printf "::: GPU utilisation, sampled every second: mean %.0f %%, at least 50 %% in %.0f %% of %d " \
        "samples; memory used at most %d MiB (%s)\n", sum / n, 100 * busy / n, n, peak, FILENAME}' \
      "$out/$gpu_samples"
  fi
  [ "$status" -eq 0 ] || failed+=("$part: $*")
}
otherwise() {  # otherwise PART SECONDS COMMAND...: a step that runs only when the step before failed so early that
  # this one fits in what is left of that one's time limit
  if [ "$listing" = table ]; then
    printf '%-8s %4ss  %s  # only if the step before failed within its first %s s\n' "$1" "$2" "${*:3}" \
      "$((last_limit - $2))"
    return 0
  elif [ -z "$listing" ]; then
    [ "$last_ran" = 1 ] && [ "$last_status" -ne 0 ] || { last_ran=0; return 0; }
    if [ $((last_limit - last_seconds)) -lt "$2" ]; then
      echo "::: the step before failed after $last_seconds s: too late for the ${2} s of: ${*:3}"
      last_ran=0
      return 0
    fi
  fi
  step "$@"
}
keep() {  # keep NAME PATH...: the paths the step before made, packed into $OUT/NAME.tar.gz as soon as it ended
  [ -z "$listing" ] && [ "$last_ran" = 1 ] || return 0
  local name=$1 present=() path
  shift
  for path in "$@"; do [ -e "$path" ] && present+=("$path"); done
  if [ ${#present[@]} -eq 0 ]; then
    echo "::: nothing to keep for $name.tar.gz"
  elif tar czf "$out/$name.tar.gz" "${present[@]}"; then
    echo "::: kept in $name.tar.gz: ${present[*]}"
  fi
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
if [ ${#failed[@]} -gt 0 ]; then
  printf 'gpu-session: %s step(s) failed:\n' "${#failed[@]}"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "gpu-session: every step of ${parts[*]} ended well"
