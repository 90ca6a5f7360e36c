/* The core clock, measured: a chain of dependent integer adds retires one add per cycle on every
 * out-of-order core we know of (x86-64, AArch64), so adds / seconds is the clock the core runs
 * at, turbo included. The loop counter's increment and branch are independent of the chain.
 *
 * The "busy" variants run the widest vector FMAs alongside the chain, 32 or 64 per 32 adds (one
 * or two FMA pipes kept full, as FMA peak code does), so the chain reads the clock the core holds
 * while its FMA units are saturated: on many x86 parts wide-vector code runs below the scalar
 * turbo clock (frequency licences, power limits), and a vector peak is only reached at it. */
#include <stdint.h>

#define ADD8_X86 "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t" \
                 "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
#define ADD8_ARM "add %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\t" \
                 "add %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\t"

#if defined(__x86_64__)
#define CHAIN32(x, step) __asm__ volatile(ADD8_X86 ADD8_X86 ADD8_X86 ADD8_X86 : "+r"(x) : "r"(step))
#elif defined(__aarch64__)
#define CHAIN32(x, step) __asm__ volatile(ADD8_ARM ADD8_ARM ADD8_ARM ADD8_ARM : "+r"(x) : "r"(step))
#else
#define CHAIN32(x, step) ((void)0)
#endif

#if defined(__AVX512F__)
#define VECTOR_BYTES 64
#elif defined(__AVX__)
#define VECTOR_BYTES 32
#else
#define VECTOR_BYTES 16
#endif
typedef double vdouble __attribute__((vector_size(VECTOR_BYTES)));

/* Adds done per iteration; 0 when this architecture has no probe. */
int charz_clock_adds_per_iteration(void) {
#if defined(__x86_64__) || defined(__aarch64__)
    return 32;
#else
    return 0;
#endif
}

int charz_clock_vector_bytes(void) { return VECTOR_BYTES; }

/* Runs iters x 32 dependent adds of `step` and returns the sum (kept live by the caller). */
uint64_t charz_clock_chain(uint64_t iters, uint64_t step) {
    uint64_t x = 0;
    for (uint64_t i = 0; i < iters; ++i) {
        CHAIN32(x, step);
    }
    return x;
}

/* Eight independent FMA chains (enough to cover a 4-cycle latency on two pipes). */
#define FMA8 a0 = a0 * m + b; a1 = a1 * m + b; a2 = a2 * m + b; a3 = a3 * m + b; \
             a4 = a4 * m + b; a5 = a5 * m + b; a6 = a6 * m + b; a7 = a7 * m + b;

/* The chain with `fma_blocks_x8` x 8 vector FMAs per 32 adds (4: one pipe; 8: two pipes).
 * `sink` receives the FMA accumulators' sum so the vector work stays live. */
#define BUSY_BODY(BLOCKS)                                                      \
    for (uint64_t i = 0; i < iters; ++i) {                                     \
        CHAIN32(x, step);                                                      \
        BLOCKS                                                                 \
    }

uint64_t charz_clock_chain_busy(uint64_t iters, uint64_t step, int fma_pipes, double *sink) {
    uint64_t x = 0;
    vdouble m, b, a0, a1, a2, a3, a4, a5, a6, a7;
    for (int k = 0; k < VECTOR_BYTES / 8; ++k) {
        m[k] = 0.999999; b[k] = 1e-7; a0[k] = 1.0 + k;
    }
    a1 = a0; a2 = a0; a3 = a0; a4 = a0; a5 = a0; a6 = a0; a7 = a0;
    if (fma_pipes >= 2) {
        BUSY_BODY(FMA8 FMA8 FMA8 FMA8 FMA8 FMA8 FMA8 FMA8)
    } else {
        BUSY_BODY(FMA8 FMA8 FMA8 FMA8)
    }
    vdouble total = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
    double sum = 0.0;
    for (int k = 0; k < VECTOR_BYTES / 8; ++k) sum += total[k];
    *sink = sum;
    return x;
}
