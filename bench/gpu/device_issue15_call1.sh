set -uo pipefail
nvidia-smi -L; date -u
mkdir -p build/bench
nvcc -O2 -o build/bench/cgw bench/gpu/cupti_graph_windows.cu -lcupti -lcuda -L/usr/local/cuda/lib64 -I/usr/local/cuda/include 2>&1 | grep -v Remark
timeout 240 build/bench/cgw $OUT/cgw.csv 2>&1 | tee $OUT/cgw.txt
gzip -f $OUT/cgw.csv
source deploy/offline/bcc-offline-env.sh .bcc-bundle >/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/agent:$PWD/bench/gpu${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
make -s shim CUDA_HOME=/usr/local/cuda || exit 1
for dc in 1 10; do
  GPU_AGENT_DEBUG=1 timeout 200 python3 -m gpu_agent record --duty-cycle $dc -o $OUT/graph-dc$dc.pb.gz -- python3 bench/gpu/overhead.py graph --steps 20000 2>&1 | grep -E "exit \(|us_per_step|gpu-agent: processes|rror" | cut -c1-600
  python3 -c "
import sys, window_fidelity as W
from pathlib import Path
for name,(ns,n) in sorted(W.profile_kernels(Path('$OUT/graph-dc$dc.pb.gz')).items(), key=lambda kv:-kv[1][0])[:4]:
    print(f'dc=$dc {name[:50]:50s} launches {n:9d} gpu_ms {ns/1e6:10.1f} per-launch_us {ns/max(n,1)/1e3:8.2f}')
"
done
