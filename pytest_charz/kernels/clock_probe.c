/* The core clock, measured: a chain of dependent integer adds retires one add per cycle on every
 * out-of-order core we know of (x86-64, AArch64), so adds / seconds is the clock the core runs
 * at, turbo included. The loop counter's increment and branch are independent of the chain and
 * run on other ports. */
#include <stdint.h>

#define ADD8_X86 "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t" \
                 "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
#define ADD8_ARM "add %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\t" \
                 "add %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\t"

/* Adds done per iteration; 0 when this architecture has no probe. */
int charz_clock_adds_per_iteration(void) {
#if defined(__x86_64__) || defined(__aarch64__)
    return 32;
#else
    return 0;
#endif
}

/* Runs iters x 32 dependent adds of `step` and returns the sum (kept live by the caller). */
uint64_t charz_clock_chain(uint64_t iters, uint64_t step) {
    uint64_t x = 0;
    for (uint64_t i = 0; i < iters; ++i) {
#if defined(__x86_64__)
        __asm__ volatile(ADD8_X86 ADD8_X86 ADD8_X86 ADD8_X86 : "+r"(x) : "r"(step));
#elif defined(__aarch64__)
        __asm__ volatile(ADD8_ARM ADD8_ARM ADD8_ARM ADD8_ARM : "+r"(x) : "r"(step));
#endif
    }
    return x;
}
