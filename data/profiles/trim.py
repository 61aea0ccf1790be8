"""Trims Vidur's A100 profiles to the columns the cost model reads (see README.md)."""
import csv, os, shutil, sys

SRC, DST = sys.argv[1], sys.argv[2]  # e.g. ../shared/data/profiles/a100 data/profiles/a100
KEYS = {"n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
        "num_tokens", "num_tensor_parallel_workers", "n_q_head", "block_size", "max_model_len",
        "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill",
        "num_workers", "size", "collective", "devices_per_node", "max_devices_per_node", "rank"}

def trim(src, dst):
    with open(src, newline="") as f:
        r = csv.reader(f)
        head = next(r)
        keep = [i for i, h in enumerate(head) if h in KEYS or (h.startswith("time_stats.") and h.endswith(".median")
                and "reshape" not in h)]
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "w", newline="") as g:
            w = csv.writer(g, lineterminator="\n")
            w.writerow([head[i] for i in keep])
            for row in r:
                w.writerow([row[i] for i in keep])

for d in sorted(os.listdir(SRC)):
    p = os.path.join(SRC, d)
    if d == "device_config.yml":
        shutil.copy(p, os.path.join(DST, d))
    elif d.startswith("network_dgx") or d.startswith("network_pairwise"):
        for c in ("all_reduce.csv", "send_recv.csv"):
            trim(os.path.join(p, c), os.path.join(DST, d, c))
    elif os.path.exists(os.path.join(p, "mlp.csv")):
        os.makedirs(os.path.join(DST, d), exist_ok=True)
        shutil.copy(os.path.join(p, "model_config.yml"), os.path.join(DST, d, "model_config.yml"))
        for c in ("mlp.csv", "attention.csv"):
            if os.path.exists(os.path.join(p, c)):
                trim(os.path.join(p, c), os.path.join(DST, d, c))

# Serving-engine CPU overheads: keep the medians of the phases that leave the GPU idle
# between iterations.
CPU = ["schedule_median", "sampler_e2e_median", "prepare_inputs_e2e_median",
       "process_model_outputs_median", "model_name", "batch_size", "tensor_parallel_degree"]
src = os.path.join(SRC, "cpu_overhead", "cpu_overheads.csv")
if os.path.exists(src):
    dst = os.path.join(DST, "cpu_overhead", "cpu_overheads.csv")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(src, newline="") as f, open(dst, "w", newline="") as g:
        r = csv.DictReader(f)
        w = csv.writer(g, lineterminator="\n")
        w.writerow(CPU)
        for row in r:
            w.writerow([row[k] for k in CPU])
