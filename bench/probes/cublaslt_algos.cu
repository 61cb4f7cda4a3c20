// Probe: every cuBLASLt algorithm and config for C = A·Bᵀ (A [M, K], B [N, K],
// C [M, N], all row-major; bf16 in and out, f32 accumulation) on this GPU,
// timed, so that cuBLAS's own `mma.sync` kernels can be told from its Hopper
// ones and measured: the fair ceiling for our `mma.sync` path (issue 3).
//
// Build and run on the GPU machine:
//   nvcc -O2 -std=c++17 bench/probes/cublaslt_algos.cu -lcublasLt -o /tmp/lt
//   /tmp/lt time M N K best.txt        # times every config, writes each algo's best (and best right) to best.txt
//   ncu --metrics gpu__time_duration.sum /tmp/lt names M N K best.txt
//                                       # runs each best config once, after a `marker`
//                                       # kernel whose grid is the line number: the name of
//                                       # the kernel cuBLASLt launched for that line; then
//                                       # the heuristic's list, after markers 1001, 1002, ...
// Each config's C is compared with the heuristic's first choice: "ok", "relu"
// (only the negative outputs differ, and they are zero), or "wrong".
// Timing: events around the matmul alone, a 256 MiB memset between calls to flush
// the L2 (50 MiB), medians; a first pass of 5 calls per config, then the best
// config of each algorithm again with 30.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e = (x);                                                               \
        if (e != cudaSuccess) {                                                            \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define LT(x)                                                                             \
    do {                                                                                  \
        cublasStatus_t s = (x);                                                           \
        if (s != CUBLAS_STATUS_SUCCESS) {                                                 \
            fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, (int)s);     \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

__global__ void marker(int) {}

__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        p[i] = __float2bfloat16(((h & 0xffff) / 65535.0f - 0.5f));
    }
}

struct Cfg {
    int algo;
    unsigned tile, stages, cluster, swizzle, custom;
    double us;
    const char* verdict;
};

static const size_t WORKSPACE = 32u << 20;
static const size_t FLUSH = 256u << 20;

struct Problem {
    int m, n, k;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    __nv_bfloat16 *a, *b, *c;
    void *ws, *flush;
    cudaEvent_t e0, e1;

    Problem(int m_, int n_, int k_) : m(m_), n(n_), k(k_) {
        LT(cublasLtCreate(&lt));
        LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
        // Column-major cuBLASLt sees row-major C[m, n] as Cᵀ[n, m] = B·Aᵀ: its
        // A is our B (k×n, transposed), its B our A (k×m).
        LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, n, k));
        LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, m, k));
        LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n));
        CK(cudaMalloc(&a, (size_t)m * k * 2));
        CK(cudaMalloc(&b, (size_t)n * k * 2));
        CK(cudaMalloc(&c, (size_t)m * n * 2));
        CK(cudaMalloc(&ws, WORKSPACE));
        CK(cudaMalloc(&flush, FLUSH));
        fill<<<1024, 256>>>(a, (size_t)m * k, 1);
        fill<<<1024, 256>>>(b, (size_t)n * k, 2);
        CK(cudaDeviceSynchronize());
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
    }

    // The config's algo, or false when cuBLASLt refuses it for this problem.
    bool algo(const Cfg& c, cublasLtMatmulAlgo_t* al) {
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, c.algo, al) != CUBLAS_STATUS_SUCCESS) return false;
        int one = 1;
        uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
        cublasLtMatmulAlgoConfigSetAttribute(al, CUBLASLT_ALGO_CONFIG_TILE_ID, &c.tile, sizeof c.tile);
        cublasLtMatmulAlgoConfigSetAttribute(al, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c.stages, sizeof c.stages);
        cublasLtMatmulAlgoConfigSetAttribute(al, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c.cluster, sizeof c.cluster);
        cublasLtMatmulAlgoConfigSetAttribute(al, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c.swizzle, sizeof c.swizzle);
        cublasLtMatmulAlgoConfigSetAttribute(al, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c.custom, sizeof c.custom);
        cublasLtMatmulAlgoConfigSetAttribute(al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof one);
        cublasLtMatmulAlgoConfigSetAttribute(al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, sizeof none);
        cublasLtMatmulHeuristicResult_t r;
        if (cublasLtMatmulAlgoCheck(lt, op, la, lb, lc, lc, al, &r) != CUBLAS_STATUS_SUCCESS) return false;
        return r.workspaceSize <= WORKSPACE;
    }

    bool run(const cublasLtMatmulAlgo_t* al) {
        float one = 1, zero = 0;
        return cublasLtMatmul(lt, op, &one, b, la, a, lb, &zero, c, lc, c, lc, al, ws, WORKSPACE, 0) == CUBLAS_STATUS_SUCCESS;
    }

    // Median of `reps` timed calls, each after an L2 flush; negative if a call failed.
    double time(const cublasLtMatmulAlgo_t* al, int reps) {
        if (!run(al) || !run(al)) return -1;
        std::vector<float> t;
        for (int i = 0; i < reps; i++) {
            CK(cudaMemsetAsync(flush, i & 0xff, FLUSH));
            CK(cudaEventRecord(e0));
            if (!run(al)) return -1;
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        return t[t.size() / 2] * 1e3;
    }

    // Up to 32 results of cuBLASLt's heuristic, best first.
    std::vector<cublasLtMatmulHeuristicResult_t> heuristic() {
        cublasLtMatmulPreference_t pref;
        LT(cublasLtMatmulPreferenceCreate(&pref));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WORKSPACE, sizeof WORKSPACE));
        std::vector<cublasLtMatmulHeuristicResult_t> r(32);
        int got = 0;
        LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 32, r.data(), &got));
        r.resize(got);
        return r;
    }

    // C from cuBLASLt's first choice, for `verify`.
    std::vector<__nv_bfloat16> want;

    // "ok", "relu" (only negative outputs differ, and those are zero: a
    // ReLU epilogue), or "wrong": C against `want`, element by element.
    const char* verify() {
        std::vector<__nv_bfloat16> got((size_t)m * n);
        CK(cudaMemcpy(got.data(), c, got.size() * 2, cudaMemcpyDeviceToHost));
        size_t bad = 0, relu = 0;
        for (size_t i = 0; i < got.size(); i++) {
            float g = __bfloat162float(got[i]), w = __bfloat162float(want[i]);
            if (fabsf(g - w) > 1e-2f * (1 + fabsf(w))) {
                bad++;
                relu += (w < 0 && g == 0);
            }
        }
        return bad == 0 ? "ok" : bad == relu ? "relu" : "wrong";
    }

    double tflops(double us) const { return 2.0 * m * n * k / (us * 1e-6) / 1e12; }
};

// An algorithm capability that is an array of ids, or {0} when it has none.
static std::vector<uint32_t> ids(const cublasLtMatmulAlgo_t* al, cublasLtMatmulAlgoCapAttributes_t cap) {
    size_t bytes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(al, cap, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0) return {0};
    std::vector<uint32_t> v(bytes / sizeof(uint32_t));
    cublasLtMatmulAlgoCapGetAttribute(al, cap, v.data(), bytes, &bytes);
    return v.empty() ? std::vector<uint32_t>{0} : v;
}

static int algo_id(const cublasLtMatmulAlgo_t& al) {
    int id = -1;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(&al, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    return id;
}

static void print(FILE* f, const Cfg& c, const Problem& p) {
    fprintf(f, "%d %u %u %u %u %u %.1f %.1f %s\n", c.algo, c.tile, c.stages, c.cluster, c.swizzle, c.custom, c.us, p.tflops(c.us), c.verdict);
}

int main(int argc, char** argv) {
    if (argc != 6 || (strcmp(argv[1], "time") && strcmp(argv[1], "names"))) {
        fprintf(stderr, "usage: %s time|names M N K FILE\n", argv[0]);
        return 2;
    }
    Problem p(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));

    if (!strcmp(argv[1], "names")) {
        FILE* f = fopen(argv[5], "r");
        if (!f) { perror(argv[5]); return 1; }
        Cfg c;
        for (int line = 1; fscanf(f, "%d %u %u %u %u %u %lf %*f %*s", &c.algo, &c.tile, &c.stages, &c.cluster, &c.swizzle, &c.custom, &c.us) == 7; line++) {
            cublasLtMatmulAlgo_t al;
            marker<<<line, 32>>>(line);
            if (p.algo(c, &al)) p.run(&al);
            CK(cudaDeviceSynchronize());
            printf("line %d: algo %d tile %u stages %u cluster %u swizzle %u custom %u\n", line, c.algo, c.tile, c.stages, c.cluster, c.swizzle, c.custom);
        }
        // The heuristic's list, after markers 1001, 1002, ...
        std::vector<cublasLtMatmulHeuristicResult_t> heur = p.heuristic();
        for (size_t i = 0; i < heur.size(); i++) {
            marker<<<1001 + i, 32>>>(0);
            p.run(&heur[i].algo);
            CK(cudaDeviceSynchronize());
        }
        return 0;
    }

    printf("%s, %d×%d×%d (C = A·Bᵀ, bf16, f32 accumulation)\n", prop.name, p.m, p.n, p.k);
    // cuBLASLt's heuristic list: its first choice is the figure our bench calls "cuBLAS".
    std::vector<cublasLtMatmulHeuristicResult_t> heur = p.heuristic();
    for (size_t i = 0; i < heur.size(); i++) {
        double us = p.time(&heur[i].algo, i == 0 ? 30 : 10);
        if (i == 0) {
            p.want.resize((size_t)p.m * p.n);
            CK(cudaMemcpy(p.want.data(), p.c, p.want.size() * 2, cudaMemcpyDeviceToHost));
        }
        printf("heuristic choice %zu (algo %d): %.1f us, %.1f TFLOP/s, %s\n", i, algo_id(heur[i].algo), us, p.tflops(us), p.verify());
    }

    int algos[1024], n_algos = 0;
    LT(cublasLtMatmulAlgoGetIds(p.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, 1024, algos, &n_algos));
    printf("%d algorithm ids\n", n_algos);
    printf("# algo tile stages cluster swizzle custom us TFLOP/s verdict  (first pass, 5 calls)\n");
    std::vector<Cfg> best;
    for (int i = 0; i < n_algos; i++) {
        cublasLtMatmulAlgo_t al;
        if (cublasLtMatmulAlgoInit(p.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, algos[i], &al) != CUBLAS_STATUS_SUCCESS) continue;
        // Cluster shapes have no capability to list: 0 lets a Hopper kernel pick its own.
        std::vector<uint32_t> tiles = ids(&al, CUBLASLT_ALGO_CAP_TILE_IDS), stages = ids(&al, CUBLASLT_ALGO_CAP_STAGES_IDS), clusters = {0};
        int32_t swz = 0, custom_max = 0;
        size_t w;
        cublasLtMatmulAlgoCapGetAttribute(&al, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz, sizeof swz, &w);
        cublasLtMatmulAlgoCapGetAttribute(&al, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max, sizeof custom_max, &w);
        // The fastest config, and the fastest whose C is right, when they differ.
        Cfg top{algos[i], 0, 0, 0, 0, 0, 1e30, ""}, top_ok = top;
        int tried = 0;
        for (uint32_t t : tiles)
            for (uint32_t s : stages)
                for (uint32_t cl : clusters)
                    for (uint32_t sw = 0; sw <= (swz ? 1u : 0u); sw++)
                        for (uint32_t cu = 0; cu <= (uint32_t)custom_max; cu++) {
                            Cfg c{algos[i], t, s, cl, sw, cu, 0, ""};
                            cublasLtMatmulAlgo_t cal;
                            if (!p.algo(c, &cal)) continue;
                            c.us = p.time(&cal, 5);
                            if (c.us <= 0) continue;
                            c.verdict = p.verify();
                            tried++;
                            print(stdout, c, p);
                            if (c.us < top.us) top = c;
                            if (c.us < top_ok.us && !strcmp(c.verdict, "ok")) top_ok = c;
                        }
        fprintf(stderr, "algo %d: %d configs ran\n", algos[i], tried);
        if (tried) best.push_back(top);
        if (top_ok.us < 1e30 && top_ok.us != top.us) best.push_back(top_ok);
    }
    printf("# each algorithm's best config again, 30 calls\n");
    FILE* f = fopen(argv[5], "w");
    for (Cfg& c : best) {
        cublasLtMatmulAlgo_t al;
        p.algo(c, &al);
        c.us = p.time(&al, 30);
        c.verdict = p.verify();
        print(stdout, c, p);
        print(f, c, p);
    }
    fclose(f);
    return 0;
}
