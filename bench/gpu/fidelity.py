"""Fidelity workload: one kernel launched from two call sites in a known ratio.

site_a launches the elementwise add 3 times per step, site_b once, with the
same tensors, so the true split of that kernel's GPU time is 75 % / 25 %.
Run under `gpu-agent record`; bench/gpu/check_fidelity.py reads the profile
and reports the estimated shares (default sampling) against the truth, plus the
exact launch count (steps x 4) against the agent's kernel_launches.
"""

import sys

import torch


def site_a(x, y):
    for _ in range(3):
        x.add_(y)


def site_b(x, y):
    x.add_(y)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    x = torch.zeros(4096, device="cuda")
    y = torch.ones(4096, device="cuda")
    torch.cuda.synchronize()
    for _ in range(steps):
        site_a(x, y)
        site_b(x, y)
    torch.cuda.synchronize()
    print(f"fidelity: {steps} steps, {4 * steps} add launches, x[0]={x[0].item():.0f}")


if __name__ == "__main__":
    main()
