// Probe: the H100's mma.sync throughput, with operands already in registers
// ("pure") and with ldmatrix reloading them from shared memory every k-step
// as a GEMM main loop does ("ldsm"). Build and run on the GPU machine:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a bench/probes/mma_peak.cu -o /tmp/mma_peak && /tmp/mma_peak
#include <cstdio>
#include <cuda_runtime.h>

template <bool LDSM>
__global__ void peak(float* out, int iters) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned a[4][4], b[8][2];
    float acc[4][8][4] = {};
    unsigned base = (unsigned)__cvta_generic_to_shared(smem) + (threadIdx.x % 32) * 16 + (threadIdx.x / 32) * 1024;
    for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) a[i][j] = threadIdx.x * 7 + i + j;
    for (int i = 0; i < 8; i++) for (int j = 0; j < 2; j++) b[i][j] = threadIdx.x * 5 + i + j;
    for (int it = 0; it < iters; it++) {
        if (LDSM) {
            for (int i = 0; i < 4; i++)
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(base + i * 4096));
            for (int i = 0; i < 4; i++)
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(b[2 * i][0]), "=r"(b[2 * i][1]), "=r"(b[2 * i + 1][0]), "=r"(b[2 * i + 1][1]) : "r"(base + 16384 + i * 4096));
        }
#pragma unroll
        for (int m = 0; m < 4; m++)
#pragma unroll
            for (int n = 0; n < 8; n++)
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(acc[m][n][0]), "+f"(acc[m][n][1]), "+f"(acc[m][n][2]), "+f"(acc[m][n][3])
                             : "r"(a[m][0]), "r"(a[m][1]), "r"(a[m][2]), "r"(a[m][3]), "r"(b[n][0]), "r"(b[n][1]));
    }
    float s = 0;
    for (int m = 0; m < 4; m++) for (int n = 0; n < 8; n++) for (int k = 0; k < 4; k++) s += acc[m][n][k];
    if (s == 1.2345f) out[threadIdx.x] = s;
}

template <bool LDSM>
void run(int warps, int blocks_per_sm) {
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    float* out; cudaMalloc(&out, 4096);
    int iters = 20000, smem = 40960;
    cudaFuncSetAttribute(peak<LDSM>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    dim3 grid(sms * blocks_per_sm);
    peak<LDSM><<<grid, warps * 32, smem>>>(out, 100);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    float best = 1e30;
    for (int r = 0; r < 5; r++) {
        cudaEventRecord(e0);
        peak<LDSM><<<grid, warps * 32, smem>>>(out, iters);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); if (ms < best) best = ms;
    }
    double flops = 2.0 * 16 * 8 * 16 * 32 * (double)iters * warps * grid.x;
    printf("%-5s warps/block %d blocks/SM %d: %.1f TFLOP/s (%s)\n", LDSM ? "ldsm" : "pure", warps, blocks_per_sm,
           flops / best / 1e9, cudaGetErrorString(cudaGetLastError()));
    cudaFree(out);
}

int main() {
    for (int w : {4, 8}) for (int b : {1, 2, 4}) if (w * b <= 16) { run<false>(w, b); run<true>(w, b); }
}
