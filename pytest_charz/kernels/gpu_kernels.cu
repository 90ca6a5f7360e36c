/* GPU microbenchmark kernels of pytest-charz.
 *
 * Compiled at run time by CuPy's RawModule (NVRTC) from pytest_charz/kernels/gpu.py, which
 * launches them and documents the FLOPs and bytes of every kernel. The code keeps to the subset
 * of CUDA C++ that HIP also accepts (no inline PTX, no warp-size assumptions), so the same file
 * builds with hipRTC.
 *
 * Every kernel's result depends on all the work it did and is stored only when the runtime flag
 * `store` is set (the caller passes 0 when timing): the compiler cannot know the flag, so it
 * cannot remove the work, and no store traffic is added to what is measured.
 */
#if defined(__HIPCC__) || defined(__HIPCC_RTC__)
#include <hip/hip_fp16.h>
#else
#include <cuda_fp16.h>
#endif

/* Independent FMA chains per thread: enough to cover the FMA pipeline latency (4 cycles on
 * recent NVIDIA and AMD parts) several times over with a few warps per scheduler.
 * kernels/gpu.py reads this value for its FLOP accounting. */
#define CHARZ_FMA_CHAINS 8

/* The launcher fills every SM with CHARZ_BLOCKS_PER_SM blocks of CHARZ_BLOCK_THREADS threads
 * (kernels/gpu.py, fill_grid). All of them must be resident at once: with more registers per
 * thread than 65536 / (256 x 8) = 32 only 6 blocks fit, the grid becomes 1.33 waves, and the
 * second wave's blocks run alone while most SMs idle. The bounds cap the registers to fit. */
#define CHARZ_BLOCK_THREADS 256
#define CHARZ_BLOCKS_PER_SM 8
#define CHARZ_BOUNDS __launch_bounds__(CHARZ_BLOCK_THREADS, CHARZ_BLOCKS_PER_SM)

#define CHARZ_THREAD_ID (blockIdx.x * (long long)blockDim.x + threadIdx.x)
#define CHARZ_THREAD_COUNT ((long long)gridDim.x * blockDim.x)

/* ------------------------------------------------------------------ FMA throughput
 * Per thread: CHARZ_FMA_CHAINS x iters fused multiply-adds, then CHARZ_FMA_CHAINS - 1 adds to
 * combine the chains. acc = acc * mul + add with 0 < mul < 1 converges to add / (1 - mul), so
 * values neither overflow nor become subnormal, whatever iters is. */

extern "C" __global__ void CHARZ_BOUNDS fma_fp64(double* out, int iters, int store, double mul, double add)
{
    const long long tid = CHARZ_THREAD_ID;
    double acc[CHARZ_FMA_CHAINS];
#pragma unroll
    for (int c = 0; c < CHARZ_FMA_CHAINS; ++c) acc[c] = (double)((tid + c) & 1023) * 1.0e-3;
#pragma unroll 4
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CHARZ_FMA_CHAINS; ++c) acc[c] = fma(acc[c], mul, add);
    }
    double sum = acc[0];
#pragma unroll
    for (int c = 1; c < CHARZ_FMA_CHAINS; ++c) sum += acc[c];
    if (store) out[tid] = sum;
}

extern "C" __global__ void CHARZ_BOUNDS fma_fp32(float* out, int iters, int store, float mul, float add)
{
    const long long tid = CHARZ_THREAD_ID;
    float acc[CHARZ_FMA_CHAINS];
#pragma unroll
    for (int c = 0; c < CHARZ_FMA_CHAINS; ++c) acc[c] = (float)((tid + c) & 1023) * 1.0e-3f;
#pragma unroll 4
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CHARZ_FMA_CHAINS; ++c) acc[c] = fmaf(acc[c], mul, add);
    }
    float sum = acc[0];
#pragma unroll
    for (int c = 1; c < CHARZ_FMA_CHAINS; ++c) sum += acc[c];
    if (store) out[tid] = sum;
}

/* Packed half precision: each __hfma2 is two FMAs (four FLOPs). `out` is a float16 array of two
 * elements per thread; mul and add arrive as float and are converted once. */
extern "C" __global__ void CHARZ_BOUNDS fma_fp16x2(__half2* out, int iters, int store, float mul, float add)
{
    const long long tid = CHARZ_THREAD_ID;
    const __half2 m = __float2half2_rn(mul);
    const __half2 a = __float2half2_rn(add);
    __half2 acc[CHARZ_FMA_CHAINS];
#pragma unroll
    for (int c = 0; c < CHARZ_FMA_CHAINS; ++c) acc[c] = __float2half2_rn((float)((tid + c) & 1023) * 1.0e-3f);
#pragma unroll 4
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CHARZ_FMA_CHAINS; ++c) acc[c] = __hfma2(acc[c], m, a);
    }
    __half2 sum = acc[0];
#pragma unroll
    for (int c = 1; c < CHARZ_FMA_CHAINS; ++c) sum = __hadd2(sum, acc[c]);
    if (store) out[tid] = sum;
}

/* ------------------------------------------------------------------ STREAM
 * McCalpin's four kernels over fp64 arrays of n elements, grid-stride. The arrays must be
 * 16-byte aligned (the launcher checks): the body moves double2 vectors, and the first thread
 * handles the odd last element. Bytes per launch: copy and scale 16 n, add and triad 24 n.
 *
 * The main-memory case launches a grid that covers the arrays, one double2 per thread (as
 * BabelStream does); the contention case launches fewer blocks, and the loop covers the rest.
 * Measured on an H200, triad of 128 MiB arrays: 4.24 TB/s covered, 3.85 with one resident wave
 * of blocks looping over the arrays. So no minimum of resident blocks is asked of the compiler:
 * with CHARZ_BOUNDS, add and triad spilled to local memory at 32 registers. */
#define CHARZ_STREAM_BOUNDS __launch_bounds__(CHARZ_BLOCK_THREADS)

extern "C" __global__ void CHARZ_STREAM_BOUNDS stream_copy(const double* __restrict__ a, double* __restrict__ c, long long n)
{
    const double2* a2 = reinterpret_cast<const double2*>(a);
    double2* c2 = reinterpret_cast<double2*>(c);
    for (long long i = CHARZ_THREAD_ID; i < n / 2; i += CHARZ_THREAD_COUNT) c2[i] = a2[i];
    if (CHARZ_THREAD_ID == 0 && (n & 1)) c[n - 1] = a[n - 1];
}

extern "C" __global__ void CHARZ_STREAM_BOUNDS stream_scale(const double* __restrict__ c, double* __restrict__ b, double scalar,
                                        long long n)
{
    const double2* c2 = reinterpret_cast<const double2*>(c);
    double2* b2 = reinterpret_cast<double2*>(b);
    for (long long i = CHARZ_THREAD_ID; i < n / 2; i += CHARZ_THREAD_COUNT) {
        const double2 x = c2[i];
        b2[i] = make_double2(scalar * x.x, scalar * x.y);
    }
    if (CHARZ_THREAD_ID == 0 && (n & 1)) b[n - 1] = scalar * c[n - 1];
}

extern "C" __global__ void CHARZ_STREAM_BOUNDS stream_add(const double* __restrict__ a, const double* __restrict__ b,
                                      double* __restrict__ c, long long n)
{
    const double2* a2 = reinterpret_cast<const double2*>(a);
    const double2* b2 = reinterpret_cast<const double2*>(b);
    double2* c2 = reinterpret_cast<double2*>(c);
    for (long long i = CHARZ_THREAD_ID; i < n / 2; i += CHARZ_THREAD_COUNT) {
        const double2 x = a2[i];
        const double2 y = b2[i];
        c2[i] = make_double2(x.x + y.x, x.y + y.y);
    }
    if (CHARZ_THREAD_ID == 0 && (n & 1)) c[n - 1] = a[n - 1] + b[n - 1];
}

extern "C" __global__ void CHARZ_STREAM_BOUNDS stream_triad(double* __restrict__ a, const double* __restrict__ b,
                                        const double* __restrict__ c, double scalar, long long n)
{
    const double2* b2 = reinterpret_cast<const double2*>(b);
    const double2* c2 = reinterpret_cast<const double2*>(c);
    double2* a2 = reinterpret_cast<double2*>(a);
    for (long long i = CHARZ_THREAD_ID; i < n / 2; i += CHARZ_THREAD_COUNT) {
        const double2 y = b2[i];
        const double2 z = c2[i];
        a2[i] = make_double2(y.x + scalar * z.x, y.y + scalar * z.y);
    }
    if (CHARZ_THREAD_ID == 0 && (n & 1)) a[n - 1] = b[n - 1] + scalar * c[n - 1];
}

/* ------------------------------------------------------------------ latency
 * One thread follows `steps` dependent loads through `next`, a single-cycle permutation built
 * on the host: each load's address is the previous load's value, so the time per step is the
 * load-to-use latency of the level the array fits in. Launch with one block of one thread. */
extern "C" __global__ void pointer_chase(const unsigned int* next, long long steps, unsigned int start,
                                         unsigned int* out)
{
    unsigned int index = start;
#pragma unroll 4
    for (long long s = 0; s < steps; ++s) index = next[index];
    out[0] = index;
}

/* hold: one thread spins for `cycles` clock cycles of its SM. The device's timer launches it
 * after synchronizing and before a batch's start event, so that the host's time to issue the
 * batch's first call passes while the stream is still busy: the start event fires when the first
 * call is already queued behind it (nvbench's blocking kernel, with a fixed length instead of a
 * host flag). Launch with one block of one thread. */
extern "C" __global__ void hold(long long cycles)
{
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

/* copy_passes: c = a, `passes` times over in one launch, so that a working set small enough to
 * sit in L2 is timed over enough bytes to hide the launch. __syncthreads() between passes is a
 * compiler barrier: the repeated stores cannot be merged away. Bytes: 16 n passes. */
extern "C" __global__ void CHARZ_BOUNDS copy_passes(const double* a, double* c, long long n, int passes)
{
    const double2* a2 = reinterpret_cast<const double2*>(a);
    double2* c2 = reinterpret_cast<double2*>(c);
    for (int p = 0; p < passes; ++p) {
        for (long long i = CHARZ_THREAD_ID; i < n / 2; i += CHARZ_THREAD_COUNT) c2[i] = a2[i];
        if (CHARZ_THREAD_ID == 0 && (n & 1)) c[n - 1] = a[n - 1];
        __syncthreads();
    }
}

/* An empty kernel: what a launch costs with no work in it. */
extern "C" __global__ void empty_kernel() {}
