"""Real-GPU check: CUDA-graph replays attributed to the code that captured them.

A small model with distinctly named submodules (Attention, FeedForward, Head)
is captured once with torch.cuda.graph() and replayed N times from
replay_many(). Run it under the agent and read the profile:

    gpu-agent record -o graph.pb.gz -- python bench/gpu/graph_capture.py 2000
    python bench/gpu/graph_capture.py --check graph.pb.gz     # pass/fail summary
    pprof -traces graph.pb.gz | less                           # the stacks themselves
    pprof -tags graph.pb.gz                                    # cuda_graph_replay label

What a correct profile shows (see docs/graphs.md):
  - every kernel of the replays sits under the frame `[cuda graph replay]`;
    above it, the capture-time stack: Python frames `Attention.forward`,
    `FeedForward.forward` or `Head.forward` (this file), then `Block.forward`,
    `capture`, i.e. the submodule whose code launched that kernel during capture;
  - no replay kernel has `replay_many` in its stack; instead the label
    cuda_graph_replay is `replay_many (graph_capture.py:LINE)` (or `[unsampled]`
    for the share of replays that had no sampled launch);
  - no `[graph captured before attach]` frame (the agent was there from the start);
  - the warm-up (eager) kernels keep their ordinary launch stacks;
  - --check prints GPU time per capture function and fails if less than 95 % of
    the replayed kernels' time is under a capture function (Block.forward counts:
    it launches the residual adds itself).
"""

import sys

FILE = "graph_capture.py"
# Qualnames end with these (the classes live in build(): build.<locals>.Attention.forward).
# Block.forward launches the residual adds itself.
CAPTURE_FNS = ("Attention.forward", "FeedForward.forward", "Head.forward", "Block.forward")


def build():
    import torch

    class Attention(torch.nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.qkv = torch.nn.Linear(d, 3 * d)
            self.out = torch.nn.Linear(d, d)
            self.heads = heads

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
            y = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            return self.out(y.transpose(1, 2).reshape(b, t, d))

    class FeedForward(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.up = torch.nn.Linear(d, 4 * d)
            self.down = torch.nn.Linear(4 * d, d)

        def forward(self, x):
            return self.down(torch.nn.functional.gelu(self.up(x)))

    class Head(torch.nn.Module):
        def __init__(self, d, vocab):
            super().__init__()
            self.norm = torch.nn.LayerNorm(d)
            self.proj = torch.nn.Linear(d, vocab)

        def forward(self, x):
            return torch.softmax(self.proj(self.norm(x)), dim=-1)

    class Block(torch.nn.Module):
        def __init__(self, d=1024, heads=16, vocab=8192):
            super().__init__()
            self.attn = Attention(d, heads)
            self.ff = FeedForward(d)
            self.head = Head(d, vocab)

        def forward(self, x):
            x = x + self.attn(x)
            x = x + self.ff(x)
            return self.head(x)

    return Block


def capture(model, x):
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up (eager): ordinary launch stacks
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    return g, y


def replay_many(g, n):
    import torch

    for _ in range(n):
        g.replay()
    torch.cuda.synchronize()


def main(n):
    import time

    import torch

    torch.manual_seed(0)
    model = build()().cuda().half().eval()
    x = torch.randn(8, 256, 1024, device="cuda", dtype=torch.half)
    with torch.no_grad():
        g, _ = capture(model, x)
        replay_many(g, n)
    time.sleep(0.5)  # let the agent read this process's Python code objects
    print(f"graph_capture: {n} replays on {torch.cuda.get_device_name()}")


def check(path):
    """Summarize a profile of this program (needs the repo's agent importable)."""
    import gzip
    from collections import defaultdict

    sys.path.insert(0, __file__.rsplit("/bench/", 1)[0] + "/agent")
    from gpu_agent.proto import profile_pb2

    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress(open(path, "rb").read()))
    st = p.string_table
    fn = {f.id: st[f.name] for f in p.function}
    loc = {loc.id: fn[loc.line[0].function_id] if loc.line else "?" for loc in p.location}
    by_capture, replay_total, before_attach = defaultdict(int), 0, 0
    sites = defaultdict(int)
    for s in p.sample:
        frames = [loc[i] for i in s.location_id]
        ns = s.value[0]
        labels = {st[lb.key]: st[lb.str] for lb in s.label}
        if "[graph captured before attach]" in frames:
            before_attach += ns
        if len(frames) < 2 or frames[1] != "[cuda graph replay]":
            continue
        replay_total += ns
        sites[labels.get("cuda_graph_replay", "?")] += ns
        owner = next((c for f in frames for c in CAPTURE_FNS if f.endswith(c)), None)
        by_capture[owner or "(no capture function)"] += ns
        if "replay_many" in frames:
            by_capture["(replay_many in stack: WRONG)"] += ns
    print(f"replayed kernels: {replay_total / 1e6:.3f} ms GPU")
    for k, v in sorted(by_capture.items(), key=lambda kv: -kv[1]):
        print(f"  under {k:32s} {v / 1e6:10.3f} ms  {100 * v / max(replay_total, 1):5.1f} %")
    print("replay sites (label cuda_graph_replay):")
    for k, v in sorted(sites.items(), key=lambda kv: -kv[1]):
        print(f"  {k:48s} {v / 1e6:10.3f} ms")
    print(f"[graph captured before attach]: {before_attach / 1e6:.3f} ms (expected 0)")
    ok = (
        replay_total > 0
        and before_attach == 0
        and sum(by_capture[f] for f in CAPTURE_FNS) >= 0.95 * replay_total
        and not by_capture.get("(replay_many in stack: WRONG)")
    )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check"]:
        sys.exit(check(sys.argv[2]))
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
