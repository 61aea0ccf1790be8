// The CUDA kernels of the executor (every op but the GEMMs, which are cuBLAS).
// Compiled at run time by NVRTC with no headers (the PyPI NVRTC wheel ships none, and
// INFINITY is not defined without them): bf16 is stored as unsigned short and every
// kernel computes in f32, rounding its output once, round-to-nearest-even, as
// half::bf16::from_f32 does. Semantics, layouts and argument orders follow
// core/exec/src/cpu/math.rs; the elementwise kernels use explicit _rn intrinsics so
// that ptxas cannot contract a*b+c into an FMA the CPU does not do (bit-exact results).
// A data error the CPU backend refuses (an id, slot, position or block out of range)
// cannot fail a launch here: the kernel writes NaN (argmax: -1) where its output was.
// HEAD_DIM is a compile-time define: a runtime-bounded per-lane array went to the
// stack (executor.md §7).

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#define BLOCK_TOKENS 16
#define ATTN_WARPS 8
#define DPL ((HEAD_DIM + 31) / 32)
#define MAX_SUM_PARTS 8

typedef unsigned short bf16_t;

__device__ __forceinline__ float bf2f(bf16_t h) { return __uint_as_float(((unsigned int)h) << 16); }

__device__ __forceinline__ bf16_t f2bf(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
#define BF16_NAN ((bf16_t)0x7fc0)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ float block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    float t = lane < warps ? part[lane] : 0.0f;
    return warp_sum(t);
}

// out[t] = table[ids[t]]; grid T, block 256.
extern "C" __global__ void embedding(const int* ids, const bf16_t* table, bf16_t* out, int hidden, int vocab) {
    int t = blockIdx.x, id = ids[t];
    bool ok = id >= 0 && id < vocab;
    const bf16_t* src = table + (long long)(ok ? id : 0) * hidden;
    bf16_t* dst = out + (long long)t * hidden;
#pragma unroll 4
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = ok ? src[i] : BF16_NAN;
}

// x · rsqrt(mean(x²) + eps) · w per row; grid rows, block 256.
extern "C" __global__ void rmsnorm(const bf16_t* x, const bf16_t* w, bf16_t* out, int width, float eps) {
    const bf16_t* row = x + (long long)blockIdx.x * width;
    bf16_t* dst = out + (long long)blockIdx.x * width;
    float ss = 0.0f;
    // Unrolled so several loads are in flight: one row is one block, latency-bound when
    // rows are few (the sum's order is unchanged).
#pragma unroll 4
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        float v = bf2f(row[i]);
        ss += v * v;
    }
    ss = block_sum(ss);
    float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)width), eps)));
#pragma unroll 4
    for (int i = threadIdx.x; i < width; i += blockDim.x)
        dst[i] = f2bf(__fmul_rn(__fmul_rn(bf2f(row[i]), inv), bf2f(w[i])));
}

// out[i] = x[rows[i]]; grid n, block 256.
extern "C" __global__ void gather_rows(const bf16_t* x, const int* rows, bf16_t* out, int width, int x_rows) {
    int r = rows[blockIdx.x];
    bool ok = r >= 0 && r < x_rows;
    const bf16_t* src = x + (long long)(ok ? r : 0) * width;
    bf16_t* dst = out + (long long)blockIdx.x * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = ok ? src[i] : BF16_NAN;
}

// HF rotate-half RoPE in place on the q and k heads of each qkv row; table is
// cos[max_pos][D/2] then sin[max_pos][D/2] (f32, built on the host). grid T, block 256.
extern "C" __global__ void rope(bf16_t* qkv, const int* pos, const float* table, int heads_q, int heads_kv,
                                int max_pos) {
    const int half = HEAD_DIM / 2, row = (heads_q + 2 * heads_kv) * HEAD_DIM;
    int t = blockIdx.x, p = pos[t];
    bool ok = p >= 0 && p < max_pos;
    bf16_t* base = qkv + (long long)t * row;
    const float* cs = table + (long long)(ok ? p : 0) * half;
    const float* sn = table + ((long long)max_pos + (ok ? p : 0)) * half;
    int pairs = (heads_q + heads_kv) * half;
    for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
        int head = j / half, i = j % half;
        bf16_t* h = base + head * HEAD_DIM;
        if (!ok) {
            h[i] = BF16_NAN;
            h[i + half] = BF16_NAN;
            continue;
        }
        float a = bf2f(h[i]), b = bf2f(h[i + half]), c = cs[i], s = sn[i];
        h[i] = f2bf(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        h[i + half] = f2bf(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
    }
}

// k and v of token t into cache slot slots[t] (K half then V half of a layer's cache,
// `half` elements each); slot < 0 is skipped. grid T, block 256.
extern "C" __global__ void cache_write(const bf16_t* qkv, const int* slots, bf16_t* cache, int heads_q,
                                       int heads_kv, long long half) {
    const int kvw = heads_kv * HEAD_DIM, row = (heads_q + 2 * heads_kv) * HEAD_DIM;
    int t = blockIdx.x, slot = slots[t];
    if (slot < 0) return;
    long long at = (long long)slot * kvw;
    if (at + kvw > half) return;
    const bf16_t* k = qkv + (long long)t * row + heads_q * HEAD_DIM;
    for (int i = threadIdx.x; i < kvw; i += blockDim.x) {
        cache[at + i] = k[i];
        cache[half + at + i] = k[kvw + i];
    }
}

// Paged causal attention with GQA, for decodes and prefill chunks alike. One block of
// ATTN_WARPS warps per (query row, head); each warp takes tiles of 32 visible keys in
// turn (tile i = warp, warp + ATTN_WARPS, ...): lane j scores key 32i + j against q (in
// shared memory), the tile's scores update the warp's online softmax, then lanes own
// HEAD_DIM/32 dims each and accumulate the tile's 32 values rows. 32 keys' loads are in
// flight at once (walking one key at a time left a decode latency-bound at ~1 µs a key
// per warp, 74 µs at 256 keys on an H200). The warps merge in shared memory. Query row r
// of sequence s (q_start[s] <= r < q_start[s+1]) sits at position ctx_lens[s] - q_len + j
// and sees keys 0..=that. grid (rows, H), block 32·ATTN_WARPS.
extern "C" __global__ void paged_attention(const bf16_t* qkv, const bf16_t* cache, const int* tables,
                                           const int* q_start, const int* ctx_lens, bf16_t* out, int seqs,
                                           int max_blocks, int heads_q, int heads_kv, long long half) {
    __shared__ float s_m[ATTN_WARPS], s_l[ATTN_WARPS];
    __shared__ float s_acc[ATTN_WARPS][HEAD_DIM];
    __shared__ float s_q[HEAD_DIM];
    const int kvw = heads_kv * HEAD_DIM, row_w = (heads_q + 2 * heads_kv) * HEAD_DIM;
    int r = blockIdx.x, head = blockIdx.y;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // The sequence of row r: the last s with q_start[s] <= r.
    int lo = 0, hi = seqs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (q_start[mid] <= r) lo = mid; else hi = mid - 1;
    }
    // A row outside every sequence is left as it was, as on the CPU.
    if (seqs <= 0 || r < q_start[0] || r >= q_start[seqs]) return;
    int s = lo, q0 = q_start[s], q1 = q_start[s + 1], ctx = ctx_lens[s];
    bf16_t* o = out + (long long)r * heads_q * HEAD_DIM + head * HEAD_DIM;
    bool ok = r >= q0 && r < q1 && q1 - q0 <= ctx && ctx <= max_blocks * BLOCK_TOKENS;
    int visible = ctx - (q1 - q0) + (r - q0) + 1;
    int kvh = head / (heads_q / (heads_kv > 0 ? heads_kv : 1));
    const bf16_t* qr = qkv + (long long)r * row_w + head * HEAD_DIM;
    for (int d = threadIdx.x; d < HEAD_DIM; d += blockDim.x) s_q[d] = bf2f(qr[d]);
    __syncthreads();
    float acc[DPL];
    for (int j = 0; j < DPL; j++) acc[j] = 0.0f;
    const float scale = rsqrtf((float)HEAD_DIM);
    // Every key row 16-byte aligned (the cache, its V half and a slot's row): vector loads.
    const bool vec = ((((unsigned long long)cache) | (unsigned long long)(half * 2) |
                       (unsigned long long)(kvw * 2) | (unsigned long long)(HEAD_DIM * 2)) & 15ull) == 0;
    float m = neg_inf(), l = 0.0f;
    bool bad = !ok;
    for (int t0 = 32 * warp; ok && t0 < visible; t0 += 32 * ATTN_WARPS) {
        int t = t0 + lane;
        bool live = t < visible;
        long long slot = 0;
        bool wrong = false;
        if (live) {
            int b = tables[(long long)s * max_blocks + t / BLOCK_TOKENS];
            slot = (long long)b * BLOCK_TOKENS + t % BLOCK_TOKENS;
            wrong = b < 0 || (slot + 1) * kvw > half;
        }
        if (__any_sync(0xffffffffu, wrong)) {
            bad = true;
            break;
        }
        float dot = 0.0f;
        if (live) {
            const bf16_t* k = cache + slot * kvw + kvh * HEAD_DIM;
#if HEAD_DIM % 8 == 0
            if (vec) {
                // 16-byte loads (8 dims each): a lane's key row in HEAD_DIM/8 loads.
                const uint4* k4 = (const uint4*)k;
#pragma unroll 4
                for (int c = 0; c < HEAD_DIM / 8; c++) {
                    uint4 u = k4[c];
                    unsigned int w[4] = {u.x, u.y, u.z, u.w};
                    for (int e = 0; e < 4; e++) {
                        dot += s_q[8 * c + 2 * e] * bf2f((bf16_t)(w[e] & 0xffffu));
                        dot += s_q[8 * c + 2 * e + 1] * bf2f((bf16_t)(w[e] >> 16));
                    }
                }
            } else
#endif
            {
#pragma unroll 16
                for (int d = 0; d < HEAD_DIM; d++) dot += s_q[d] * bf2f(k[d]);
            }
        }
        float sc = live ? dot * scale : neg_inf();
        float mt = sc;
        for (int w = 16; w > 0; w >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, w));
        float m2 = fmaxf(m, mt), corr = expf(m - m2);
        float p = live ? expf(sc - m2) : 0.0f;
        l = l * corr + warp_sum(p);
        for (int j = 0; j < DPL; j++) acc[j] *= corr;
        int n = min(32, visible - t0);
#pragma unroll 4
        for (int kk = 0; kk < n; kk++) {
            float pk = __shfl_sync(0xffffffffu, p, kk);
            long long sk = __shfl_sync(0xffffffffu, (int)slot, kk);
            const bf16_t* v = cache + half + sk * kvw + kvh * HEAD_DIM;
            for (int j = 0; j < DPL; j++) {
                int d = lane + 32 * j;
                if (d < HEAD_DIM) acc[j] += pk * bf2f(v[d]);
            }
        }
        m = m2;
    }
    if (lane == 0) {
        s_m[warp] = bad ? __int_as_float(0x7fc00000) : m;
        s_l[warp] = l;
    }
    for (int j = 0; j < DPL; j++) {
        int d = lane + 32 * j;
        if (d < HEAD_DIM) s_acc[warp][d] = acc[j];
    }
    __syncthreads();
    if (warp != 0) return;
    float mm = neg_inf();
    bool any_bad = false;
    for (int w = 0; w < ATTN_WARPS; w++) {
        any_bad |= s_m[w] != s_m[w];
        mm = fmaxf(mm, s_m[w]);
    }
    float ll = 0.0f, f[ATTN_WARPS];
    for (int w = 0; w < ATTN_WARPS; w++) {
        f[w] = s_l[w] > 0.0f ? expf(s_m[w] - mm) : 0.0f;
        ll += s_l[w] * f[w];
    }
    for (int j = 0; j < DPL; j++) {
        int d = lane + 32 * j;
        if (d >= HEAD_DIM) continue;
        float a = 0.0f;
        for (int w = 0; w < ATTN_WARPS; w++) a += s_acc[w][d] * f[w];
        o[d] = any_bad ? BF16_NAN : f2bf(a / ll);
    }
}

// out = a + b; grid-stride.
extern "C" __global__ void residual_add(const bf16_t* a, const bf16_t* b, bf16_t* out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = f2bf(__fadd_rn(bf2f(a[i]), bf2f(b[i])));
}

// out[t,i] = silu(x[t,i]) · x[t,I+i] for gate|up rows of width 2I; grid-stride over T·I.
extern "C" __global__ void silu_mul(const bf16_t* x, bf16_t* out, long long rows, int inter) {
    long long n = rows * inter;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / inter, c = i % inter;
        float g = bf2f(x[r * 2 * inter + c]), u = bf2f(x[r * 2 * inter + inter + c]);
        out[i] = f2bf(__fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u));
    }
}

// out = Σ parts in order (rank order: every rank gets identical bits); grid-stride.
extern "C" __global__ void sum_parts(bf16_t* out, long long n, int count, const bf16_t* p0, const bf16_t* p1,
                                     const bf16_t* p2, const bf16_t* p3, const bf16_t* p4, const bf16_t* p5,
                                     const bf16_t* p6, const bf16_t* p7) {
    const bf16_t* p[MAX_SUM_PARTS] = {p0, p1, p2, p3, p4, p5, p6, p7};
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < MAX_SUM_PARTS; j++)
            if (j < count) s = __fadd_rn(s, bf2f(p[j][i]));
        out[i] = f2bf(s);
    }
}

// Greedy sampling over a row spread across `shards` blocks of [rows][shard_n] f32
// logits; ties take the lowest id, a NaN anywhere in the row gives -1. grid rows, block 256.
extern "C" __global__ void argmax(const float* logits, int* out, int rows, int shards, int shard_n) {
    __shared__ float s_v[256];
    __shared__ int s_i[256];
    __shared__ int s_nan;
    int r = blockIdx.x;
    if (threadIdx.x == 0) s_nan = 0;
    __syncthreads();
    float best = neg_inf();
    int idx = -1;
    bool nan = false;
    long long total = (long long)shards * shard_n;
    for (long long g = threadIdx.x; g < total; g += blockDim.x) {
        int sh = (int)(g / shard_n), c = (int)(g % shard_n);
        float v = logits[((long long)sh * rows + r) * shard_n + c];
        nan |= v != v;
        if (v > best) {
            best = v;
            idx = (int)g;
        }
    }
    if (nan) s_nan = 1;
    s_v[threadIdx.x] = best;
    s_i[threadIdx.x] = idx;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            float v2 = s_v[threadIdx.x + w];
            int i2 = s_i[threadIdx.x + w];
            float v1 = s_v[threadIdx.x];
            int i1 = s_i[threadIdx.x];
            if (v2 > v1 || (v2 == v1 && i2 >= 0 && (i1 < 0 || i2 < i1))) {
                s_v[threadIdx.x] = v2;
                s_i[threadIdx.x] = i2;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[r] = s_nan ? -1 : s_i[0];
}

// Spins for `ns` nanoseconds of %globaltimer per block: the saturating load of the GPU
// check's priority test (executor.md §9e), and an empty kernel with ns = 0.
extern "C" __global__ void spin(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
}
