"""Real-GPU smoke check: a small PyTorch program, eager and CUDA-graph replay.

Run under `gpu-agent record` on an H100/H200; the profile must show the
GEMM/GELU kernels under the named functions below, with sensible GPU time.
"""

import sys

import torch


class TinyMLP(torch.nn.Module):
    def __init__(self, width=1024, depth=6):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return x


def eager_steps(model, x, steps):
    for _ in range(steps):
        y = model(x)
    torch.cuda.synchronize()
    return y


def capture_graph(model, x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    return g, y


def replay_graph(g, steps):
    for _ in range(steps):
        g.replay()
    torch.cuda.synchronize()


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    torch.manual_seed(0)
    model = TinyMLP().cuda().half()
    x = torch.randn(16, 1024, device="cuda", dtype=torch.half)
    with torch.no_grad():
        eager_steps(model, x, steps)
        g, _ = capture_graph(model, x)
        replay_graph(g, steps)
    print(f"smoke: {steps} eager steps and {steps} graph replays on {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
