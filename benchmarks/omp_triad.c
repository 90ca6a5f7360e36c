/* A standalone OpenMP STREAM triad, the reference the Python triad kernel is compared with.
 *
 * usage: omp_triad N [REPS [THREADS]]
 *   N        doubles per array (three arrays: 24 * N bytes in all)
 *   REPS     timed repetitions (default 20), after one untimed warm-up pass
 *   THREADS  OpenMP threads (default: omp_get_max_threads())
 *
 * Prints one line of key=value pairs: best and median bandwidth in bytes/s, counted the STREAM
 * way (24 bytes per element: read b and c, write a; the write-allocate read is not counted).
 * Arrays are page-aligned and first touched by the threads that use them (static schedule);
 * stores are plain (no non-temporal stores are forced), like the kernel it is compared with.
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int compare_doubles(const void *left, const void *right)
{
    double a = *(const double *)left, b = *(const double *)right;
    return (a > b) - (a < b);
}

static void triad(double *restrict a, const double *restrict b, const double *restrict c, double scalar,
                  int64_t n, int threads)
{
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; i++)
        a[i] = b[i] + scalar * c[i];
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s N [REPS [THREADS]]\n", argv[0]);
        return 2;
    }
    int64_t n = strtoll(argv[1], NULL, 10);
    int reps = argc > 2 ? atoi(argv[2]) : 20;
    int threads = argc > 3 ? atoi(argv[3]) : omp_get_max_threads();
    if (n < 1 || reps < 1 || threads < 1) {
        fprintf(stderr, "N, REPS and THREADS must be positive\n");
        return 2;
    }
    size_t bytes = (size_t)n * sizeof(double);
    size_t rounded = (bytes + 4095) / 4096 * 4096;
    double *a = aligned_alloc(4096, rounded), *b = aligned_alloc(4096, rounded), *c = aligned_alloc(4096, rounded);
    double *rates = malloc((size_t)reps * sizeof(double));
    if (!a || !b || !c || !rates) {
        fprintf(stderr, "out of memory for 3 x %lld doubles\n", (long long)n);
        return 1;
    }
    omp_set_dynamic(0);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; i++) {
        a[i] = 1.0;
        b[i] = 2.0 + (double)(i & 1023) * 1e-3;
        c[i] = 0.5 + (double)(i & 511) * 1e-3;
    }
    const double scalar = 3.0;
    triad(a, b, c, scalar, n, threads); /* warm-up: page tables, thread team */
    for (int r = 0; r < reps; r++) {
        double start = omp_get_wtime();
        triad(a, b, c, scalar, n, threads);
        double elapsed = omp_get_wtime() - start;
        rates[r] = 24.0 * (double)n / elapsed;
    }
    /* Check the result so the loop is not optimised away and a wrong triad is not reported. */
    for (int64_t i = 0; i < n; i += 4099) {
        double expected = b[i] + scalar * c[i];
        if (a[i] != expected) {
            fprintf(stderr, "triad result wrong at %lld: %g != %g\n", (long long)i, a[i], expected);
            return 1;
        }
    }
    qsort(rates, (size_t)reps, sizeof(double), compare_doubles);
    double median = reps % 2 ? rates[reps / 2] : 0.5 * (rates[reps / 2 - 1] + rates[reps / 2]);
    printf("n=%lld threads=%d reps=%d best_bytes_per_s=%.6e median_bytes_per_s=%.6e\n", (long long)n, threads, reps,
           rates[reps - 1], median);
    free(a);
    free(b);
    free(c);
    free(rates);
    return 0;
}
