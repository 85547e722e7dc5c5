"""A launch flood that outruns CUPTI's buffers (issue 16, item 10): the loss is
counted node-wide and shown in the flooding process's own profile, as
`[dropped: cupti]` launches, while another process's totals stay exact."""

from __future__ import annotations

from gpu_agent.profile.vocabulary import DROPPED_CUPTI

from .faultkit import settle


def test_lost_records_are_each_process_s_dropped_launches(node, honest):
    calm = honest("--paths", "cuLaunchKernel", "--iters", "300", "--sleep-ms", "5")
    # One 1 MiB buffer for a burst of launches as fast as the mock goes.
    flood = honest("--bench", "300000", "--api", "cudaLaunchKernel", env={"GPU_AGENT_BUFFER_POOL_MB": "1"})
    before = node.metrics().get("cupti", 0)
    flood.wait()
    calm.wait()
    settle(node)
    lost = node.metrics().get("cupti", 0) - before
    node.stop()
    samples = node.samples()
    mine = [s for s in samples if s.labels.get("pid") == str(flood.proc.pid)]
    dropped = sum(s.values[1] for s in mine if s.frames == [DROPPED_CUPTI])
    recorded = sum(s.values[1] for s in mine if s.frames != [DROPPED_CUPTI])
    truth = sum(n for n, _ in flood.truth().values())
    assert lost > 0 and dropped == lost, "the flood lost nothing, or its profile does not say"
    assert recorded + dropped == truth
    assert all(s.values[0] > 0 for s in mine if s.frames == [DROPPED_CUPTI])  # estimated GPU time
    calm.assert_exact(samples)
