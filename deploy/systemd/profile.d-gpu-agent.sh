# /etc/profile.d/gpu-agent.sh: every login shell (and what it starts) loads the gpu-agent shim
# into CUDA programs. Copy the shim to a stable path first:
#   gpu-agent install-shim --dest /opt/gpu-agent/lib
# Trade-offs: see README "Bare metal". Programs not started from a login shell (systemd
# services, cron) need the variable in their own environment (Environment= in the unit).
if [ -z "${CUDA_INJECTION64_PATH:-}" ] && [ -r /opt/gpu-agent/lib/libgpu_agent_shim.so ]; then
    export CUDA_INJECTION64_PATH=/opt/gpu-agent/lib/libgpu_agent_shim.so
fi
