#!/usr/bin/env bash
# Issue 10's check on a real NVIDIA GPU (run it on a machine with one; nothing here needs the network):
# NVML discovery by `danlu server`, a real CUDA workload in a sandboxed rental metered and sampled
# end to end (utilisation, memory, power, temperature through NVML), then the same rental going idle
# and being stopped by --idle-stop with its measured reason, the event, /metrics and the chart.
#
#   tools/device_check.sh            # everything it prints also goes to $OUT/log (default /tmp/danlu-device)
#
# Python packages the machine lacks may sit as wheels in .whl/ and a bubblewrap binary in
# .devtools/bwrap (how the project's device runs carried them); a CUDA-enabled PyTorch must be
# importable by `python3` (the workload), and is made visible inside the sandbox under /usr/local.
set -u
OUT=${OUT:-/tmp/danlu-device}
mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
T0=$(date +%s)
t() { echo; echo "== [$(($(date +%s) - T0)) s] $*"; }
export COLUMNS=${COLUMNS:-150}
IDLE=${IDLE:-20s}
BUSY_S=${BUSY_S:-30}

# DRY=1: the same steps on simulated GPUs with a CPU loop for a workload (checks this script, not a GPU).
if [ "${DRY:-0}" = 1 ]; then
  nvidia-smi() { echo "(dry run: no nvidia-smi)"; }
  SIM="--simulate-gpus A100-80GB:1"
fi
t "the GPU, as the driver sees it"
nvidia-smi --query-gpu=name,uuid,memory.total,driver_version,power.limit --format=csv
if [ "${DRY:-0}" != 1 ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
command -v bwrap >/dev/null || { [ -x .devtools/bwrap ] && install -m 0755 .devtools/bwrap /usr/local/bin/bwrap; }
python3 -c 'import danlu.api.app, danlu.server.loop, danlu.cli.main' || { echo "danlu does not import here: carry the missing packages as wheels in .whl/"; exit 1; }
danlu() { python3 -c 'import sys; from danlu.cli.main import main; sys.argv[0] = "danlu"; main()' "$@"; }

t "NVML discovery (danlu.compute.gpus.discover_nvml)"
python3 -c 'from danlu.compute.gpus import discover_nvml; [print(g) for g in discover_nvml() or ["NONE"]]'

[ "${DRY:-0}" = 1 ] || t "NVML read cost per GPU (danlu.telemetry.nvml.Nvml.read, 2000 reads)"
[ "${DRY:-0}" = 1 ] || python3 - <<'EOF'
import time, pynvml
from danlu.telemetry.nvml import Nvml
pynvml.nvmlInit(); uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
n = Nvml(); print("first reading:", n.read(uuid))
c0, w0 = time.process_time(), time.perf_counter()
for _ in range(2000): n.read(uuid)
cpu, wall = (time.process_time() - c0) / 2000, (time.perf_counter() - w0) / 2000
print(f"per read: {cpu * 1e6:.0f} us CPU, {wall * 1e6:.0f} us wall; 800 GPUs every 5 s: {800 * cpu / 5 * 100:.2f} % of a core")
EOF

# PyTorch for the renter: the image's python3 lives outside /usr (which the host image shows).
PREFIX=$(python3 -c 'import sys; print(sys.prefix)')
SBX_PY=python3
if [ "$PREFIX" != /usr ] && [ "${DRY:-0}" != 1 ]; then
  mkdir -p /usr/local/danlu-torch && mount --bind "$PREFIX" /usr/local/danlu-torch && SBX_PY=/usr/local/danlu-torch/bin/python3
fi
LIBCUDA=$(python3 -c 'import ctypes.util; print(ctypes.util.find_library("cuda") or "")')
LIBDIR=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}' | xargs -r dirname)
echo "python for the sandbox: $SBX_PY; libcuda: $LIBCUDA in ${LIBDIR:-?}; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

WORK='import time, torch
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0), flush=True)
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time(); n = 0
while time.time() - t < BUSY_S:
    y = x @ x; n += 1
    if n % 50 == 0: torch.cuda.synchronize()
torch.cuda.synchronize(); s = time.time() - t
print(f"busy {s:.0f} s: {n} bf16 8192^3 products, {n * 2 * 8192**3 / s / 1e12:.0f} TFLOP/s; now idle, memory kept", flush=True)
time.sleep(600)'
WORK=${WORK//BUSY_S/$BUSY_S}
[ "${DRY:-0}" = 1 ] && WORK="import time
t = time.time()
while time.time() - t < $BUSY_S: pass
print('busy done', flush=True); time.sleep(600)"

trial() {  # $1: extra server flags; returns 0 when the idle stop was seen
  local data=/tmp/danlu-data-$2
  rm -rf "$data"
  t "danlu server $1 (real GPUs through NVML)"
  python3 -c 'import sys; from danlu.cli.main import main; sys.argv[0] = "danlu"; main()' server \
    --data-dir "$data" --port 8000 --sample-interval 2 --tick 0.5 ${SIM:-} $1 >"$OUT/server-$2.log" 2>&1 &
  SERVER=$!
  local up=1
  for _ in $(seq 60); do curl -sf http://127.0.0.1:8000/healthz >/dev/null && { up=0; break; }; sleep 0.5; done
  head -30 "$OUT/server-$2.log"
  if [ $up != 0 ]; then echo "the server did not come up"; tail -20 "$OUT/server-$2.log"; kill "$SERVER"; return 2; fi
  export DANLU_URL=http://127.0.0.1:8000 DANLU_TOKEN=$(cat "$data/admin-token")
  MODEL=$(danlu offers --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["gpu_model"])')
  danlu admin price set "$MODEL" 20.00
  TOKEN=$(danlu admin user create alice --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  danlu admin topup alice 100.00 >/dev/null
  export DANLU_TOKEN=$TOKEN
  danlu offers
  t "rent $MODEL --idle-stop $IDLE: $BUSY_S s of bf16 matrix products, then idle with its memory held"
  ID=$(danlu rent --gpu "$MODEL" --idle-stop "$IDLE" --env "LD_LIBRARY_PATH=${LIBDIR:-}:${LD_LIBRARY_PATH:-}" --json \
    -- "$SBX_PY" -c "$WORK" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  echo "instance $ID"
  local seen=1
  for i in $(seq 60); do
    sleep 2
    S=$(danlu show "$ID" --json) || break
    ST=$(echo "$S" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["status"], d.get("billed_seconds"), d.get("cost"))')
    U=$(curl -s http://127.0.0.1:8000/metrics | grep "^danlu_gpu_utilization_ratio" | head -1)
    echo "t+$((i * 2))s $ST | $U | $(nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw --format=csv,noheader)"
    if [ "$i" = 12 ]; then
      danlu top --once
      danlu logs "$ID"
      curl -s "http://127.0.0.1:8000/api/v1/instances/$ID/metrics?since=5m" -H "Authorization: Bearer $TOKEN" >"$OUT/metrics-busy-$2.json"
      curl -s http://127.0.0.1:8000/metrics | grep -E '^danlu_gpu_(utilization|memory|power|temperature)' | head -8
    fi
    case "$ST" in stopped*) seen=0; break ;; exited* | failed* | lost*) break ;; esac
  done
  t "after the stop"
  danlu logs "$ID"
  danlu show "$ID"
  danlu show "$ID" --json >"$OUT/show-$2.json"
  python3 -c 'import json; d=json.load(open("'"$OUT/show-$2.json"'")); print("status:", d["status"], "| stop_reason:", d.get("stop_reason"), "| billed_seconds:", d.get("billed_seconds"), "| cost:", d.get("cost"))'
  danlu events
  danlu cost "$ID"
  danlu show "$ID" --chart "$OUT/chart-$2.svg" --since 10m
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
  kill "$SERVER"; wait "$SERVER" 2>/dev/null
  return $seen
}

trial "" sandboxed; rc=$?
if [ $rc = 1 ] && [ "${SANDBOXED_ONLY:-0}" != 1 ]; then
  t "the sandboxed trial did not end in an idle stop; once more unsandboxed, to tell the sandbox from the rest"
  trial "--no-sandbox" unsandboxed
fi
t "done"
