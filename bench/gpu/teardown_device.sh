#!/usr/bin/env bash
# Issue 29's device runs, as root from the repository root on a GPU node with no
# registry: bench/gpu/teardown_device.sh BCC_BUNDLE_DIR WHEEL_DIR OUT_DIR [WORKLOADS [CYCLES]]
# CYCLES: teardown_cycle.sh's set (threads, graphs, all, none); PERIODS and ON: the in-process periods; NO_TEARDOWN_TOO=1 adds the
# in-process run with GPU_AGENT_TEARDOWN=0.
#   1. bench/gpu/teardown_cycle.cu with several launching threads (no shim);
#   2. the shim's teardowns inside one PyTorch process per workload:
#      python -m bench.gpu overhead --method inprocess (6 attach/detach periods).
set -uo pipefail
bundle=$1 wheels=$2 out=$3 workloads=${4:-eager,llama} cycles=${5:-threads}
mkdir -p "$out"
[ "$cycles" = none ] || bash bench/gpu/teardown_cycle.sh "$out/tc.jsonl" "$cycles"
[ "$cycles" = none ] || python3 - "$out/tc.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    rows = d.pop("cycles_cbonly_cbs_sure_records_maybe", None) or []
    lost = sum(1 for r in rows if r[3] < r[2])
    print(json.dumps(d), "| cycles with records < sure:", lost)
PY
bash bench/gpu/device.sh "$bundle" "$wheels" \
    -- overhead --method inprocess --workloads "$workloads" --periods ${PERIODS:-6} --on ${ON:-8} --off 5 --cpus 2-5 \
       --control-cpus 12-15 --agent-cpus 8-11 --jsonl "$out/inprocess.jsonl" \
    ${NO_TEARDOWN_TOO:+-- overhead --method inprocess --workloads "$workloads" --periods 6 --on 8 --off 5 \
       --cpus 2-5 --control-cpus 12-15 --agent-cpus 8-11 --shim-env GPU_AGENT_TEARDOWN=0 --jsonl "$out/inprocess.jsonl"}
