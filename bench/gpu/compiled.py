"""Real-GPU check for Python frames: an eager model plus a torch.compile'd function.

Run under `gpu-agent record`; the profile should show the GEMM kernels under
Block.forward / Attention.forward lines of this file, and the Triton kernels of
fused_gelu_scale under its caller.
"""

import sys

import torch


class Attention(torch.nn.Module):
    def __init__(self, dim=512, heads=8):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Block(torch.nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        self.attn = Attention(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


@torch.compile
def fused_gelu_scale(x, w):
    return torch.nn.functional.gelu(x @ w) * 0.5


def train_step(model, x, w):
    y = model(x)
    return fused_gelu_scale(y.flatten(0, 1), w)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block()).cuda().half()
    x = torch.randn(8, 128, 512, device="cuda", dtype=torch.half)
    w = torch.randn(512, 512, device="cuda", dtype=torch.half)
    with torch.no_grad():
        for _ in range(steps):
            train_step(model, x, w)
    torch.cuda.synchronize()
    print(f"compiled: {steps} steps on {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
