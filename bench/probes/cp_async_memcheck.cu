// What compute-sanitizer's memcheck reports for `cp.async` copies that read
// fewer source bytes than they write (zero fill), the form a tile's edge
// chunks once used. Build and run on the GPU machine:
//   nvcc -gencode=arch=compute_90a,code=sm_90a -o /tmp/probe bench/probes/cp_async_memcheck.cu
//   for c in 0 1 2 3 4; do compute-sanitizer --tool memcheck /tmp/probe $c; done
// Each case copies 16 bytes into shared memory from a 2-byte allocation:
//   0: a plain 2-byte load of the allocation (the control: clean)
//   1: cp.async 16 bytes, src-size 2, from the allocation's start
//   2: cp.async 16 bytes, src-size 0, from the allocation's start
//   3: cp.async 16 bytes, src-size 0, from 64 bytes past the allocation
//   4: cp.async 16 bytes, src-size 16, from a 16-byte allocation (clean)
#include <cstdio>
#include <cstdlib>
#include <cstdint>

__global__ void probe(const unsigned char* src, int offset, int bytes, int plain, unsigned short* out) {
    __shared__ __align__(16) unsigned short tile[8];
    if (plain) {
        tile[0] = *reinterpret_cast<const unsigned short*>(src);
    } else {
        unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(tile));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src + offset), "r"(bytes));
        asm volatile("cp.async.commit_group;");
        asm volatile("cp.async.wait_group 0;");
    }
    __syncthreads();
    out[0] = tile[0];
}

int main(int argc, char** argv) {
    int c = argc > 1 ? atoi(argv[1]) : 0;
    unsigned char* src;
    unsigned short* out;
    cudaMalloc(&src, c == 4 ? 16 : 2);
    cudaMemset(src, 0x3c, c == 4 ? 16 : 2);
    cudaMalloc(&out, 2);
    const int offset[] = {0, 0, 0, 64, 0}, bytes[] = {0, 2, 0, 0, 16};
    probe<<<1, 1>>>(src, offset[c], bytes[c], c == 0, out);
    cudaError_t e = cudaDeviceSynchronize();
    unsigned short v = 0;
    cudaMemcpy(&v, out, 2, cudaMemcpyDeviceToHost);
    printf("case %d: %s, tile[0] = 0x%04x\n", c, cudaGetErrorString(e), v);
    return e == cudaSuccess ? 0 : 1;
}
