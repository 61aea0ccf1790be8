"""PyTorch references for gpu-check (executor.md §9, step 3): torch.matmul TFLOP/s at the
same GEMM shapes as section (c), and SDPA time for causal prefill at T = 512/2048/8192
with Llama-3-8B's heads. Prints a table and writes JSON lines to OUT/torch_ref.jsonl.
Usage: python3 scripts/torch_ref.py OUT"""
import json
import sys
import time

import torch
import torch.nn.functional as F

out = sys.argv[1] if len(sys.argv) > 1 else "."
dev = torch.device("cuda:0")
rows = []


def timed(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return ts[len(ts) // 2] * 1e-3  # median seconds


def gemm(name, t, n, k):
    # Rotating inputs as gpu-check does, so no repetition runs from L2.
    xs = [torch.randn(t, k, device=dev, dtype=torch.bfloat16) for _ in range(4)]
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    i = [0]

    def f():
        i[0] = (i[0] + 1) % 4
        return xs[i[0]] @ w.T

    s = timed(f)
    rows.append({"kind": "gemm", "name": name, "t": t, "n": n, "k": k, "us": s * 1e6, "tflops": 2 * t * n * k / s / 1e12})


t0 = time.time()
gemm("peak", 8192, 8192, 8192)
for name, n, k in [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336), ("lm_head", 128256, 4096)]:
    for t in [1, 16, 128, 1024, 4096]:
        gemm(name, t, n, k)
for t in [512, 2048, 8192]:
    q = torch.randn(1, 32, t, 128, device=dev, dtype=torch.bfloat16)
    kv = torch.randn(1, 8, t, 128, device=dev, dtype=torch.bfloat16)
    s = timed(lambda: F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True), reps=10)
    flops = 4 * 32 * t * t * 128 / 2
    rows.append({"kind": "sdpa_prefill", "t": t, "us": s * 1e6, "tflops": flops / s / 1e12})

with open(f"{out}/torch_ref.jsonl", "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)} ({time.time() - t0:.0f} s)")
print(f"{'what':<10} {'T':>5} {'us':>9} {'TFLOP/s':>8}")
for r in rows:
    print(f"{r.get('name', r['kind']):<10} {r['t']:>5} {r['us']:>9.1f} {r['tflops']:>8.1f}")
