/* CPU microbenchmark kernels of pytest-charz.
 *
 * Compiled at first use by pytest_charz/kernels/build.py and called through ctypes from
 * pytest_charz/kernels/cpu.py, which documents the FLOPs and bytes of every kernel.
 * Every kernel takes the number of OpenMP threads; without OpenMP the pragmas are ignored and
 * the Python side refuses more than one thread.
 *
 * Every kernel returns (or writes) a value derived from all the work it did, so the compiler
 * cannot remove the work, and the caller can check that value against a reference.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_thread_num(void) { return 0; }
static int omp_get_num_threads(void) { return 1; }
static int omp_get_max_threads(void) { return 1; }
static void omp_set_dynamic(int flag) { (void)flag; }
#endif

/* The widest SIMD vector the target has. */
#if defined(__AVX512F__)
#define CHARZ_VECTOR_BYTES 64
#define CHARZ_FMA_CHAINS 24 /* 32 zmm registers: 24 accumulators + multiplier + addend */
#elif defined(__AVX__)
#define CHARZ_VECTOR_BYTES 32
#define CHARZ_FMA_CHAINS 12 /* 16 ymm registers: 12 accumulators + multiplier + addend */
#else
#define CHARZ_VECTOR_BYTES 16
#define CHARZ_FMA_CHAINS 12
#endif

typedef double vf64 __attribute__((vector_size(CHARZ_VECTOR_BYTES)));
typedef float vf32 __attribute__((vector_size(CHARZ_VECTOR_BYTES)));
/* The same vectors at element alignment, for loads from buffers numpy allocated. */
typedef double vf64_unaligned __attribute__((vector_size(CHARZ_VECTOR_BYTES), aligned(8)));

#define F64_LANES ((int64_t)(CHARZ_VECTOR_BYTES / sizeof(double)))
#define F32_LANES ((int64_t)(CHARZ_VECTOR_BYTES / sizeof(float)))

/* ---------------------------------------------------------------- build facts */

int charz_vector_bytes(void) { return CHARZ_VECTOR_BYTES; }
int charz_fma_chains(void) { return CHARZ_FMA_CHAINS; }

int charz_openmp(void)
{
#ifdef _OPENMP
    return _OPENMP;
#else
    return 0;
#endif
}

int charz_max_threads(void) { return omp_get_max_threads(); }

/* The thread count a region actually ran with (it is an error for the caller if it differs). */
static void note_team(int *team_size)
{
    if (omp_get_thread_num() == 0)
        *team_size = omp_get_num_threads();
}

static double monotonic_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* Static partition of n items into parts of whole blocks: [*begin, *end) for part `index`. */
static void block_range(int64_t n, int64_t block, int parts, int index, int64_t *begin, int64_t *end)
{
    int64_t blocks = (n + block - 1) / block;
    int64_t per = blocks / parts, extra = blocks % parts;
    int64_t first = index * per + (index < extra ? index : extra);
    int64_t count = per + (index < extra ? 1 : 0);
    *begin = first * block < n ? first * block : n;
    *end = (first + count) * block < n ? (first + count) * block : n;
}

/* splitmix64: deterministic pseudo-random values for fills and permutations. */
static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A pseudo-random double in [1, 2) for element `index` of a fill seeded with `seed`. */
static double unit_random(uint64_t seed, int64_t index)
{
    return 1.0 + (double)(splitmix64(seed ^ ((uint64_t)index * 0xD1B54A32D192ED03ull)) >> 11) * 0x1.0p-53;
}

/* ---------------------------------------------------------------- 1. FMA chains */

/* Each thread runs CHARZ_FMA_CHAINS independent chains of acc = acc * a + b on full vectors,
 * enough independent FMAs in flight to cover latency x FMA units. Returns the sum of every
 * lane of every chain over all threads. `init` holds chains x lanes starting values. */
double charz_fma_f64(const double *init, double a, double b, int64_t iters, int threads, int *team_size)
{
    double total = 0.0;
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        note_team(team_size);
        vf64 acc[CHARZ_FMA_CHAINS];
        for (int c = 0; c < CHARZ_FMA_CHAINS; c++)
            memcpy(&acc[c], init + c * F64_LANES, sizeof(vf64));
        const vf64 va = (vf64){0} + a;
        const vf64 vb = (vf64){0} + b;
        for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 32
            for (int c = 0; c < CHARZ_FMA_CHAINS; c++)
                acc[c] = acc[c] * va + vb;
        }
        double local = 0.0;
        for (int c = 0; c < CHARZ_FMA_CHAINS; c++)
            for (int l = 0; l < F64_LANES; l++)
                local += acc[c][l];
        total += local;
    }
    return total;
}

double charz_fma_f32(const float *init, float a, float b, int64_t iters, int threads, int *team_size)
{
    double total = 0.0;
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        note_team(team_size);
        vf32 acc[CHARZ_FMA_CHAINS];
        for (int c = 0; c < CHARZ_FMA_CHAINS; c++)
            memcpy(&acc[c], init + c * F32_LANES, sizeof(vf32));
        const vf32 va = (vf32){0} + a;
        const vf32 vb = (vf32){0} + b;
        for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 32
            for (int c = 0; c < CHARZ_FMA_CHAINS; c++)
                acc[c] = acc[c] * va + vb;
        }
        double local = 0.0;
        for (int c = 0; c < CHARZ_FMA_CHAINS; c++)
            for (int l = 0; l < F32_LANES; l++)
                local += (double)acc[c][l];
        total += local;
    }
    return total;
}

/* ---------------------------------------------------------------- 2. STREAM */

/* The four STREAM loops (McCalpin's names and argument roles), each run `reps` times over the
 * same static partition inside one parallel region; plain stores, so the hardware reads each
 * destination line before writing it (write-allocate) unless it decides otherwise. */

/* Fill x[0:n) with pseudo-random values in [1, 2) from `seed`, each page written by the thread
 * whose static share of a STREAM loop over the same n and threads will use it (first touch). */
void charz_fill_random(double *x, int64_t n, uint64_t seed, int threads, int *team_size)
{
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads)
    {
        note_team(team_size);
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; i++)
            x[i] = unit_random(seed, i);
    }
}

void charz_stream_init(double *a, double *b, double *c, int64_t n, uint64_t seed, int threads, int *team_size)
{
    /* One loop writes all three arrays so each thread first-touches its share of each. */
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads)
    {
        note_team(team_size);
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            a[i] = unit_random(seed, i);
            b[i] = unit_random(seed + 1, i);
            c[i] = unit_random(seed + 2, i);
        }
    }
}

void charz_stream_copy(double *restrict c, const double *restrict a, int64_t n, int64_t reps, int threads, int *team_size)
{
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads)
    {
        note_team(team_size);
        for (int64_t r = 0; r < reps; r++) {
#pragma omp for schedule(static)
            for (int64_t i = 0; i < n; i++)
                c[i] = a[i];
        }
    }
}

void charz_stream_scale(double *restrict b, const double *restrict c, double scalar, int64_t n, int64_t reps, int threads,
                        int *team_size)
{
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads)
    {
        note_team(team_size);
        for (int64_t r = 0; r < reps; r++) {
#pragma omp for schedule(static)
            for (int64_t i = 0; i < n; i++)
                b[i] = scalar * c[i];
        }
    }
}

void charz_stream_add(double *restrict c, const double *restrict a, const double *restrict b, int64_t n,
                      int64_t reps, int threads, int *team_size)
{
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads)
    {
        note_team(team_size);
        for (int64_t r = 0; r < reps; r++) {
#pragma omp for schedule(static)
            for (int64_t i = 0; i < n; i++)
                c[i] = a[i] + b[i];
        }
    }
}

void charz_stream_triad(double *restrict a, const double *restrict b, const double *restrict c, double scalar,
                        int64_t n, int64_t reps, int threads, int *team_size)
{
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads)
    {
        note_team(team_size);
        for (int64_t r = 0; r < reps; r++) {
#pragma omp for schedule(static)
            for (int64_t i = 0; i < n; i++)
                a[i] = b[i] + scalar * c[i];
        }
    }
}

/* ---------------------------------------------------------------- 3. read bandwidth */

/* Enough independent vector adds in flight to cover add latency x loads per cycle. */
#if CHARZ_VECTOR_BYTES == 64
#define READ_ACCUMULATORS 16
#else
#define READ_ACCUMULATORS 8
#endif
#define READ_BLOCK (READ_ACCUMULATORS * F64_LANES)

/* Sum of x[begin:end), `reps` times over, with READ_ACCUMULATORS vector accumulators that live
 * across the repetitions, so a small (L1-sized) range pays no reduction per repetition. */
static double read_sum_range(const double *x, int64_t begin, int64_t end, int64_t reps)
{
    int64_t whole_end = begin + (end - begin) / READ_BLOCK * READ_BLOCK;
    vf64 acc[READ_ACCUMULATORS];
    for (int k = 0; k < READ_ACCUMULATORS; k++)
        acc[k] = (vf64){0};
    double tail = 0.0;
    for (int64_t r = 0; r < reps; r++) {
        for (int64_t i = begin; i < whole_end; i += READ_BLOCK) {
#pragma GCC unroll 16
            for (int k = 0; k < READ_ACCUMULATORS; k++)
                acc[k] += *(const vf64_unaligned *)(x + i + k * F64_LANES);
        }
        for (int64_t i = whole_end; i < end; i++)
            tail += x[i];
    }
    double total = tail;
    for (int k = 0; k < READ_ACCUMULATORS; k++)
        for (int l = 0; l < F64_LANES; l++)
            total += acc[k][l];
    return total;
}

/* Each thread reads its static share of x[0:n) `reps` times; returns the sum of all reads. */
double charz_read_sum(const double *x, int64_t n, int64_t reps, int threads, int *team_size)
{
    double total = 0.0;
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        note_team(team_size);
        int64_t begin, end;
        block_range(n, READ_BLOCK, omp_get_num_threads(), omp_get_thread_num(), &begin, &end);
        total += read_sum_range(x, begin, end, reps);
    }
    return total;
}

/* Fill x[0:n) with values in [1, 2), each thread writing the share charz_read_sum gives it. */
void charz_read_init(double *x, int64_t n, uint64_t seed, int threads, int *team_size)
{
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads)
    {
        note_team(team_size);
        int64_t begin, end;
        block_range(n, READ_BLOCK, omp_get_num_threads(), omp_get_thread_num(), &begin, &end);
        for (int64_t i = begin; i < end; i++)
            x[i] = unit_random(seed, i);
    }
}

/* ---------------------------------------------------------------- 4. pointer chase */

/* Lay a random single cycle over n_lines lines of line_words int64 words each: the first word of
 * line i holds the word index of the next line. Sattolo's algorithm over `order` (n_lines
 * scratch words) gives a uniformly random cyclic permutation. Returns the start word index. */
int64_t charz_chase_build(int64_t *buf, int64_t n_lines, int64_t line_words, uint64_t seed, int64_t *order)
{
    for (int64_t i = 0; i < n_lines; i++)
        order[i] = i;
    uint64_t state = seed;
    for (int64_t i = n_lines - 1; i > 0; i--) {
        state = splitmix64(state);
        /* j uniform in [0, i): multiply-shift avoids the bias of a modulo. */
        int64_t j = (int64_t)(((unsigned __int128)state * (uint64_t)i) >> 64);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    /* order[] as a mapping line -> next line is one cycle through all lines. */
    for (int64_t i = 0; i < n_lines; i++) {
        int64_t *line = buf + i * line_words;
        line[0] = order[i] * line_words;
        for (int64_t w = 1; w < line_words; w++)
            line[w] = -1;
    }
    return 0;
}

/* Shuffle order[0..count) in place (Fisher-Yates, multiply-shift draws); returns the new state. */
static uint64_t shuffle(int64_t *order, int64_t count, uint64_t state)
{
    for (int64_t i = count - 1; i > 0; i--) {
        state = splitmix64(state);
        int64_t j = (int64_t)(((unsigned __int128)state * (uint64_t)(i + 1)) >> 64);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    return state;
}

/* Lay one cycle over n_lines lines that stays inside a window of window_lines lines for a while:
 * a lap walks the even lines and then the odd ones; each half visits the windows in a random
 * order and, inside a window, its lines of that parity in a random order. Every line is visited
 * once per lap (one cycle), prefetchers see no stride, the buddy of a line (the other half of
 * its 128-byte pair, which adjacent-line prefetchers fetch with it) comes half a lap later, and
 * the pages of a window are touched many times before the walk moves on, so TLB misses are
 * about one per page per half-lap instead of one per load. `order` is n_lines scratch words;
 * `windows` is ceil(n_lines / window_lines) scratch words. */
int64_t charz_chase_build_local(int64_t *buf, int64_t n_lines, int64_t line_words, int64_t window_lines,
                                uint64_t seed, int64_t *order, int64_t *windows)
{
    if (window_lines < 2 || window_lines % 2)
        return -1;
    int64_t n_windows = (n_lines + window_lines - 1) / window_lines;
    uint64_t state = seed;
    int64_t pos = 0;
    for (int parity = 0; parity < 2; parity++) {
        for (int64_t w = 0; w < n_windows; w++)
            windows[w] = w;
        state = shuffle(windows, n_windows, state);
        for (int64_t k = 0; k < n_windows; k++) {
            int64_t first = windows[k] * window_lines;
            int64_t last = first + window_lines < n_lines ? first + window_lines : n_lines;
            int64_t start = pos;
            for (int64_t line = first + parity; line < last; line += 2)
                order[pos++] = line;
            state = shuffle(order + start, pos - start, state);
        }
    }
    for (int64_t k = 0; k < n_lines; k++) {
        int64_t *line = buf + order[k] * line_words;
        line[0] = order[(k + 1) % n_lines] * line_words;
        for (int64_t w = 1; w < line_words; w++)
            line[w] = -1;
    }
    return 0;
}

/* Follow the chain `steps` times from word index `start`; returns the word index reached. */
int64_t charz_chase(const int64_t *buf, int64_t start, int64_t steps)
{
    int64_t i = start;
    for (int64_t s = 0; s < steps; s++)
        i = buf[i];
    return i;
}

/* Length of the cycle through line 0, or -1 when a link leaves the buffer, points inside a
 * line, or the chain does not come back to line 0 within n_lines steps. */
int64_t charz_chase_cycle_length(const int64_t *buf, int64_t n_lines, int64_t line_words)
{
    int64_t i = 0;
    for (int64_t s = 1; s <= n_lines; s++) {
        int64_t next = buf[i];
        if (next < 0 || next >= n_lines * line_words || next % line_words != 0)
            return -1;
        if (next == 0)
            return s;
        i = next;
    }
    return -1;
}

/* Ask for transparent huge pages on [addr, addr + nbytes); 0 on success, else -1. */
int charz_madvise_hugepage(void *addr, size_t nbytes)
{
#ifdef MADV_HUGEPAGE
    return madvise(addr, nbytes, MADV_HUGEPAGE);
#else
    (void)addr;
    (void)nbytes;
    return -1;
#endif
}

/* ---------------------------------------------------------------- 5. memcpy and spin */

/* memcpy of nbytes, split into contiguous 64-byte-aligned chunks, one per thread. */
void charz_memcpy(void *restrict dst, const void *restrict src, int64_t nbytes, int threads, int *team_size)
{
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads)
    {
        note_team(team_size);
        int64_t begin, end;
        block_range(nbytes, 64, omp_get_num_threads(), omp_get_thread_num(), &begin, &end);
        if (end > begin)
            memcpy((char *)dst + begin, (const char *)src + begin, (size_t)(end - begin));
    }
}

#define SPIN_READ 0
#define SPIN_COPY 1
#define SPIN_CHUNK_WORDS 8192 /* check the clock and the stop flag every 64 KiB */

int64_t charz_spin_chunk_bytes(void) { return SPIN_CHUNK_WORDS * (int64_t)sizeof(double); }

/* Keep memory busy until `duration_s` has passed or *stop becomes non-zero, checked after each
 * chunk, so every thread with a share does at least one chunk. Each thread works on its static
 * share of x[0:n): SPIN_READ sums it, SPIN_COPY copies its first half onto its second. Writes the
 * bytes read plus written (no write-allocate) and the elapsed time; returns the sum of what
 * SPIN_READ read (for SPIN_COPY, of the first element each chunk wrote). */
double charz_spin(double *x, int64_t n, int mode, double duration_s, const int32_t *stop, int threads,
                  int64_t *bytes_moved, double *elapsed_s, int *team_size)
{
    double total = 0.0;
    int64_t moved = 0;
    double start = monotonic_s();
    omp_set_dynamic(0);
#pragma omp parallel num_threads(threads) reduction(+ : total, moved)
    {
        note_team(team_size);
        int64_t begin, end;
        block_range(n, 2 * READ_BLOCK, omp_get_num_threads(), omp_get_thread_num(), &begin, &end);
        int64_t span = mode == SPIN_COPY ? (end - begin) / 2 : end - begin;
        int64_t pos = 0;
        while (span > 0) {
            int64_t len = span - pos < SPIN_CHUNK_WORDS ? span - pos : SPIN_CHUNK_WORDS;
            if (mode == SPIN_COPY) {
                memcpy(x + begin + span + pos, x + begin + pos, (size_t)len * sizeof(double));
                total += x[begin + span + pos];
                moved += 2 * len * (int64_t)sizeof(double);
            } else {
                total += read_sum_range(x, begin + pos, begin + pos + len, 1);
                moved += len * (int64_t)sizeof(double);
            }
            pos = pos + len >= span ? 0 : pos + len;
            if (__atomic_load_n(stop, __ATOMIC_RELAXED) || monotonic_s() - start >= duration_s)
                break;
        }
    }
    *bytes_moved = moved;
    *elapsed_s = monotonic_s() - start;
    return total;
}

/* ---------------------------------------------------------------- 6. fork/join */

/* `reps` OpenMP parallel regions with an empty body: the cost of waking and joining a team. */
int64_t charz_fork_join(int64_t reps, int threads, int *team_size)
{
    int64_t regions = 0;
    omp_set_dynamic(0);
    for (int64_t r = 0; r < reps; r++) {
#pragma omp parallel num_threads(threads)
        {
            __asm__ __volatile__("" ::: "memory");
        }
        regions++;
    }
    /* One more region to report the team size; not counted in `regions`. */
#pragma omp parallel num_threads(threads)
    note_team(team_size);
    return regions;
}
