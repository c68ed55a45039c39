/*
 * Element-wise reductions of small arrays, for the shared-memory path's native landing
 * (mailbox.c: Mailboxes.land): out[i] = op(a[i], b[i]), with a the receiver's base and b the message.
 *
 * Why: for an 8-byte all-reduce, numpy's ufunc call (argument parsing, type resolution, an iterator)
 * costs ~0.3 us here, while the arithmetic is a nanosecond; landing a small message straight from
 * its mailbox slot into the caller's array in one C call saves that and the Python between.
 *
 * Results must equal numpy's bit for bit, since the collectives promise bit-identical results and
 * the same code path may run on some ranks and not others: IEEE addition and multiplication in the
 * element type (no fast-math, nothing to contract with), integers wrapping around as numpy's do
 * (computed unsigned: signed overflow is undefined in C), and numpy's maximum/minimum: NaN wins
 * (the first operand's if both are), and on a tie the second operand is returned (numpy 2 gives
 * maximum(+0.0, -0.0) = -0.0); tests/test_mailbox.py checks them against numpy.
 *
 * code = op * 8 + dtype: op 0 copy, 1 sum, 2 prod, 3 max, 4 min; dtype 0 float32, 1 float64,
 * 2 int32, 3 int64 (native byte order). playground/comm/shm_transport.py holds the same table.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LOOP(T, EXPR)                                                                                      \
    do {                                                                                                   \
        T *o = (T *)out;                                                                                   \
        const T *pa = (const T *)a, *pb = (const T *)b;                                                    \
        size_t n = nbytes / sizeof(T);                                                                     \
        for (size_t i = 0; i < n; i++) {                                                                   \
            T x = pa[i], y = pb[i];                                                                        \
            o[i] = (EXPR);                                                                                 \
        }                                                                                                  \
    } while (0)

#define INT_OPS(T, U)                                                                                      \
    switch (op) {                                                                                          \
    case 1: LOOP(T, (T)((U)x + (U)y)); return 0;                                                           \
    case 2: LOOP(T, (T)((U)x * (U)y)); return 0;                                                           \
    case 3: LOOP(T, x > y ? x : y); return 0;                                                              \
    case 4: LOOP(T, x < y ? x : y); return 0;                                                              \
    }                                                                                                      \
    return -1

#define FLOAT_OPS(T)                                                                                       \
    switch (op) {                                                                                          \
    case 1: LOOP(T, x + y); return 0;                                                                      \
    case 2: LOOP(T, x * y); return 0;                                                                      \
    case 3: LOOP(T, (isnan(x) || x > y) ? x : y); return 0;                                                \
    case 4: LOOP(T, (isnan(x) || x < y) ? x : y); return 0;                                                \
    }                                                                                                      \
    return -1

/* out = op(a, b) over nbytes; -1 for a code this file does not know (nothing written). Also what a
 * stream reduces its 64 KiB cells with (stream.c), so GCC is asked to vectorize it (at -O2 it does
 * not; element-wise IEEE operations give the same bits in vector lanes), for the widest vectors the
 * CPU has, chosen when the module loads (target_clones: one build runs anywhere): a cell in the
 * cache is reduced at 2x the speed with AVX2 as with the baseline's SSE2. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((optimize("O3"), target_clones("avx512f", "avx2", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
int reduce_small(int code, void *out, const void *a, const void *b, size_t nbytes) {
    int op = code >> 3, dtype = code & 7;
    if (op == 0) {
        memcpy(out, b, nbytes);
        return 0;
    }
    switch (dtype) {
    case 0: FLOAT_OPS(float);
    case 1: FLOAT_OPS(double);
    case 2: INT_OPS(int32_t, uint32_t);
    case 3: INT_OPS(int64_t, uint64_t);
    }
    return -1;
}
