// Probe: how fast the SMs can pull L2-resident data into shared memory with
// cp.async (16 B a thread), the way the GEMM main loop stages its operands.
// Every block streams the same `ws`-byte working set (it stays in L2).
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a bench/probes/l2_bw.cu -o /tmp/l2_bw && /tmp/l2_bw
#include <cstdio>
#include <cuda_runtime.h>

__global__ void pull(const char* src, size_t ws, int rounds, int* sink) {
    extern __shared__ __align__(16) char smem[];
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem) + threadIdx.x * 16;
    size_t chunk = (size_t)blockDim.x * 16 * 4;  // 4 copies in flight a thread per round
    size_t mask = ws - 1, at = ((size_t)blockIdx.x * chunk * 7) & mask;  // ws: a power of two
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 4; i++) {
            const char* p = src + ((at + (size_t)i * blockDim.x * 16 + threadIdx.x * 16) & mask);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst + i * blockDim.x * 16), "l"(p));
        }
        asm volatile("cp.async.commit_group;");
        asm volatile("cp.async.wait_group 1;");
        at = (at + chunk) & mask;
    }
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();
    if (smem[threadIdx.x] == 123 && threadIdx.x == 9999) *sink = 1;
}

int main() {
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    size_t big = 64u << 20; char* src; cudaMalloc(&src, big); cudaMemset(src, 1, big);
    int* sink; cudaMalloc(&sink, 4);
    cudaFuncSetAttribute(pull, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (size_t ws : {(size_t)8 << 20, (size_t)16 << 20, (size_t)32 << 20, big}) {
        for (int threads : {256, 512}) for (int bps : {1, 2, 4}) {
            if (threads * bps > 2048) continue;
            int rounds = 4000, blocks = sms * bps;
            pull<<<blocks, threads, threads * 64>>>(src, ws, 10, sink);  // 4 chunks of 16 B a thread
            float best = 1e30;
            for (int r = 0; r < 3; r++) {
                cudaEventRecord(e0);
                pull<<<blocks, threads, threads * 64>>>(src, ws, rounds, sink);
                cudaEventRecord(e1); cudaEventSynchronize(e1);
                float ms; cudaEventElapsedTime(&ms, e0, e1); if (ms < best) best = ms;
            }
            double bytes = (double)blocks * threads * 16 * 4 * rounds;
            printf("working set %3zu MiB, %d threads x %d blocks/SM: %.2f TB/s (%s)\n", ws >> 20, threads, bps,
                   bytes / best / 1e9, cudaGetErrorString(cudaGetLastError()));
        }
    }
}
