#!/usr/bin/env bash
# Issue 38's GPU lines, run on a lent GPU machine as prepared scripts (docs/benchmarks/gpu.md "On an H100").
#
#   bash benchmarks/gpu_checks.sh latency   # gpu_latency.py on CUDA (every size), then tiny on this host's CPU
#   bash benchmarks/gpu_checks.sh mt10      # embodia eval on MT10 with embodia-mt50, --torch-device cuda
#   bash benchmarks/gpu_checks.sh profile   # where a decision's time goes (SmolVLA- and pi0-sized, 3 cameras)
#   bash benchmarks/gpu_checks.sh sampler   # the whole-sampler graph vs per-step graphs vs eager, SmolVLA- and
#                                           # pi0-sized, bf16, 3 cameras (< 2.5 min): synced parts, kernels per
#                                           # decision, the chunks' agreement (plain, steered, inpainted);
#                                           # COMPILE=1 adds the torch.compile'd network inside the graph
#   bash benchmarks/gpu_checks.sh targets   # the two size targets after the prefix work (bf16 rows of every size,
#                                           # 1 and 3 cameras), then the sampler's and the prefix's blocks compiled
#                                           # beside the uncompiled graphs (SmolVLA- and pi0-sized, 3 cameras,
#                                           # synced parts), then tiny on the host CPU (< 7 min)
#   bash benchmarks/gpu_checks.sh compiled  # gpu_latency.py --compile: SmolVLA- and pi0-sized, bf16, 1 and 3 cameras,
#                                           # the blocks compiled inside the graphs (< 4 min)
#   bash benchmarks/gpu_checks.sh install   # only the wheels (when the two phases' wheels cannot travel together)
#   bash benchmarks/gpu_checks.sh rebuild   # rebuilding embodia-mt50 within 250 s: all 2,500 demos recorded by
#                                           # `embodia train mt50 --jobs 14` (EGL on the GPU),
#                                           # then --steps 5000 on CUDA until the time is up, each part timed, the
#                                           # whole rebuild's time projected from them if cut (rebuild.json), then
#                                           # the bundle on MT10 if time is left; TRAIN_TASKS=reach-v3,push-v3
#                                           # TRAIN_STEPS=2000 times the training half on a subset instead
#
# Wheels the machine lacks travel in .whl-latency/, .whl-mt10/ and .whl-av/ (`pip download --no-deps
# --python-version 3.12 ...` of transformers, diffusers, faiss-cpu, importlib_metadata; metaworld,
# mujoco, gymnasium, farama-notifications, pyopengl, glfw; av, which recording and training need); they
# install into /tmp/site, which later calls on the same warm machine reuse. No two of the three folders
# fit in one call's 64 MiB with the checkout, so the rebuild takes three calls in a row (each within the
# machine's 30 s of warmth after the last): `install` carrying .whl-latency, `install` carrying .whl-av,
# then `rebuild` carrying .whl-mt10 and .gl. embodia itself is imported from the checkout through a
# package of links.
# Results go to $OUT (or ./gpu-out).
set -u
phase=${1:?latency, mt10, profile, sampler, rebuild or install}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MUJOCO_GL=egl PYTHONPATH=/tmp/site:/tmp/pkg
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/card.txt"
for d in .whl-latency .whl-mt10 .whl-av; do
  if ls $d/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $d/*.whl || exit 1
  fi
done
mkdir -p /tmp/pkg/embodia && cp -r embodia/. /tmp/pkg/embodia/
for d in action_heads agent devices memory policies sim; do ln -sfn "$PWD/$d" /tmp/pkg/embodia/$d; done
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

egl() {   # MuJoCo's EGL needs the GL vendor-neutral loaders: .gl/ holds Debian's libegl1, libglvnd0, ... (.deb)
  for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done; ldconfig
  vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  [ -e $vendor ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$vendor
  python3 -c "import mujoco; m = mujoco.MjModel.from_xml_string('<mujoco/>'); r = mujoco.Renderer(m, 8, 8); print('mujoco egl ok')" || exit 4
}
stamp() { while IFS= read -r l; do printf '%s %s\n' "${EPOCHREALTIME:-$(date +%s.%N)}" "$l"; done; }

case $phase in
install) ;;
profile)
  for size in smolvla pi0; do timeout 150 python3 benchmarks/gpu_profile.py --size $size --cameras 3 > "$OUT/profile_$size.txt" 2>&1; echo "$size rc=$?"; done
  for size in smolvla pi0; do head -22 "$OUT/profile_$size.txt" | cut -c1-220; tail -1 "$OUT/profile_$size.txt"; done
  ;;
sampler)
  # COMPILE=1 adds the torch.compile'd whole graph (inductor compiles at load: allow minutes more)
  samplers=whole,step,eager; limit=150
  [ "${COMPILE:-0}" = 1 ] && samplers=whole,compiled,step,eager && limit=400
  timeout $limit python3 benchmarks/gpu_profile.py --size smolvla,pi0 --cameras 3 --samplers $samplers --agree \
      --no-tables --repeats 15 > "$OUT/sampler.txt" 2>&1
  echo "sampler rc=$?"
  grep -E "^(smolvla|pi0) |Warning|Error" "$OUT/sampler.txt" | cut -c1-900; tail -2 "$OUT/sampler.txt" | cut -c1-300
  ;;
targets)
  timeout 130 python3 benchmarks/gpu_latency.py --torch-device cuda --dtypes bfloat16 --repeats 30 \
      > "$OUT/targets_cuda.json" 2> "$OUT/targets_cuda.log"
  echo "cuda rc=$?"; grep -E "Warning|Error" "$OUT/targets_cuda.log" | sort | uniq -c | cut -c1-300
  python3 benchmarks/gpu_summary.py "$OUT/targets_cuda.json"
  # the same weights with the sampler's blocks and the prefix's blocks compiled (inductor, at load)
  timeout 220 python3 benchmarks/gpu_profile.py --size smolvla,pi0 --cameras 3 --samplers whole,allcompiled \
      --no-tables --repeats 15 > "$OUT/targets_compiled.txt" 2>&1
  echo "compiled rc=$?"
  grep -E "^(smolvla|pi0) |Warning|Error" "$OUT/targets_compiled.txt" | cut -c1-700
  timeout 40 python3 benchmarks/gpu_latency.py --torch-device cpu --sizes tiny --dtypes float32 > "$OUT/targets_cpu.json"
  echo "cpu rc=$?"; python3 benchmarks/gpu_summary.py "$OUT/targets_cpu.json"
  ;;
compiled)
  timeout 230 python3 benchmarks/gpu_latency.py --torch-device cuda --compile --sizes smolvla,pi0 --dtypes bfloat16 \
      --repeats 30 > "$OUT/compiled_cuda.json" 2> "$OUT/compiled_cuda.log"
  echo "compiled rc=$?"; grep -E "Warning|Error" "$OUT/compiled_cuda.log" | sort | uniq -c | cut -c1-300
  python3 benchmarks/gpu_summary.py "$OUT/compiled_cuda.json"
  ;;
latency)
  timeout 330 python3 benchmarks/gpu_latency.py --torch-device cuda --repeats 30 > "$OUT/gpu_latency_cuda.json"
  echo "cuda rc=$?"
  timeout 90 python3 benchmarks/gpu_latency.py --torch-device cpu --sizes tiny > "$OUT/gpu_latency_cpu.json"
  echo "cpu rc=$?"
  python3 benchmarks/gpu_summary.py "$OUT/gpu_latency_cuda.json" "$OUT/gpu_latency_cpu.json"
  ;;
mt10)
  test -d /tmp/site/transformers || { echo "the latency phase's wheels are not here (a fresh machine)"; exit 3; }
  egl
  /usr/bin/time -v timeout 420 python3 -m embodia eval -d sim:metaworld/mt10 -p embodia-mt50 -n 10 \
      --torch-device cuda --jobs 10 --json "$OUT/mt10_cuda.json" > "$OUT/mt10_cuda.log" 2> "$OUT/mt10_cuda.err"
  echo "mt10 rc=$?"
  tail -25 "$OUT/mt10_cuda.log"; grep -E "Elapsed|Maximum resident" "$OUT/mt10_cuda.err"; tail -5 "$OUT/mt10_cuda.err"
  ;;
rebuild)
  # Everything within BUDGET seconds of this phase's start (250) and DEADLINE of the script's (258, under
  # the caller's 270 s limit); a part cut by its timeout writes its sessions row (finished: false, stopped).
  test -d /tmp/site/transformers || { echo "the latency phase's wheels are not here (a fresh machine)"; exit 3; }
  test -d /tmp/site/av || { echo "PyAV is not here: run install carrying .whl-av first"; exit 3; }
  egl
  export OMP_NUM_THREADS=1    # the record workers: one thread each (the trainer sets its own, --threads)
  end=$((SECONDS + ${BUDGET:-250})); cap=${DEADLINE:-258}; [ $end -gt $cap ] && end=$cap
  left() { local l=$((end - SECONDS)); [ $l -lt 1 ] && l=1; echo $l; }    # (timeout 0 would mean none)
  rm -rf /tmp/mt50 /tmp/ckpt /tmp/bundle     # a measurement, not a resume of an earlier call
  echo "record: all 50 tasks, --jobs ${JOBS:-14}, $(left) s left"
  /usr/bin/time -v timeout $(left) python3 -m embodia train mt50 --data /tmp/mt50 --out /tmp/ckpt/embodia-mt50 \
      --jobs ${JOBS:-14} --torch-device cuda --record-only > "$OUT/rebuild_record.log" 2> "$OUT/rebuild_record.err"
  echo "record rc=$?"; tail -1 "$OUT/rebuild_record.log"
  grep -E "Elapsed|Maximum resident|Percent of CPU|^error|stopped by" "$OUT/rebuild_record.err"
  # the bundled schedule (5,000 steps, the backbone frozen after 1,000) on all 50 tasks; a subset, if asked,
  # times the loading and both kinds of step in less time
  tasks=${TRAIN_TASKS:-all}; steps=${TRAIN_STEPS:-5000}
  [ "$tasks" = all ] && tasks=
  echo "train: ${tasks:-all 50 tasks}, $steps steps, $(left) s left" | stamp | tee "$OUT/rebuild_train.log"
  timeout $(left) python3 -m embodia train mt50 --data /tmp/mt50 --out /tmp/ckpt/embodia-mt50 \
      ${tasks:+--tasks $tasks} --steps $steps --save-every 250 --threads 4 --torch-device cuda --bundle /tmp/bundle \
      2>&1 | stamp >> "$OUT/rebuild_train.log"
  echo "train rc=${PIPESTATUS[0]}"
  python3 benchmarks/rebuild_summary.py --train-log "$OUT/rebuild_train.log" --data /tmp/mt50 \
      --sessions /tmp/ckpt/embodia-mt50.sessions.jsonl --card "$(cat "$OUT/card.txt")" > "$OUT/rebuild.json"
  cat "$OUT/rebuild.json"; grep -E "step [0-9]+:|cached|episodes, [0-9]+ frames|^[0-9.]+ loaded " "$OUT/rebuild_train.log" | tail -12 | cut -c1-200
  if [ -z "$tasks" ] && [ -f /tmp/bundle/model.safetensors ] && [ "$(left)" -gt 20 ]; then
    timeout $(left) python3 -m embodia eval -d sim:metaworld/mt10 -p /tmp/bundle -n 3 --torch-device cuda --jobs 14 \
        --json "$OUT/rebuild_mt10.json" > "$OUT/rebuild_eval.log" 2>&1
    echo "eval rc=$?"; grep -E "overall" "$OUT/rebuild_eval.log"; tail -1 "$OUT/rebuild_eval.log"
  else
    echo "eval skipped: $([ -n "$tasks" ] && echo "trained on a subset" || echo "no finished bundle"), $(left) s left"
  fi
  ;;
esac
