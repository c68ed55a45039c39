/*
 * transformer_kernels.h: the fused kernels of transformer.c for one element type. transformer.c
 * includes it twice, with REAL = float, SUFFIX = f32 and with REAL = double, SUFFIX = f64; every
 * name below gets the suffix (FN(layernorm_forward) is layernorm_forward_f32 or _f64).
 *
 * Each kernel makes one pass over its rows (a row of d, of T or of V elements stays in the L1 cache
 * between the few sweeps over it), where numpy makes one pass over the whole array per operation.
 * The arithmetic is written in the order playground/transformer/layers.py's numpy writes it, in
 * the element type (the scalar constants rounded to it first, as numpy rounds a Python float), so
 * layernorm, GELU's algebra, the loss's gradient, Adam and the embedding's scatter-add give numpy's
 * bits exactly; only exp and tanh are this file's own (a polynomial, within a few units in the last
 * place of the correctly rounded value), so softmax, cross-entropy and GELU's tanh agree to rounding.
 */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SUFFIX)

/* numpy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src), which np.sum and np.mean use
 * along a contiguous axis: below 8 elements one by one, up to 128 in 8 interleaved partial sums,
 * above that the two halves (cut at a multiple of 8) summed separately. ELEM(i) is element i. */
#define PAIRWISE(NAME, PARAMS, ELEM, ARGS)                                                                  \
    KERNEL static REAL NAME(PARAMS, Py_ssize_t n) {                                                                \
        if (n < 8) {                                                                                        \
            REAL res = -0.0;                                                                                \
            for (Py_ssize_t i = 0; i < n; i++) res += ELEM(i);                                              \
            return res;                                                                                     \
        }                                                                                                   \
        if (n <= 128) {                                                                                     \
            REAL r[8];                                                                                      \
            for (int j = 0; j < 8; j++) r[j] = ELEM(j);                                                     \
            Py_ssize_t i = 8;                                                                               \
            for (; i < n - (n % 8); i += 8)                                                                 \
                for (int j = 0; j < 8; j++) r[j] += ELEM(i + j);                                            \
            REAL res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));                   \
            for (; i < n; i++) res += ELEM(i);                                                              \
            return res;                                                                                     \
        }                                                                                                   \
        Py_ssize_t n2 = n / 2;                                                                              \
        n2 -= n2 % 8;                                                                                       \
        return NAME ARGS(0, n2) + NAME ARGS(n2, n - n2);                                                    \
    }

#define E1(i) (a[i])
#define E2(i) (a[i] * b[i])
#define E3(i) ((a[i] * b[i]) * c[i])
#define A1(off, len) (a + (off), len)
#define A2(off, len) (a + (off), b + (off), len)
#define A3(off, len) (a + (off), b + (off), c + (off), len)
PAIRWISE(FN(sum1), const REAL *restrict a, E1, A1)
PAIRWISE(FN(sum2), const REAL *restrict a COMMA const REAL *restrict b, E2, A2)
/* (a * b) * c: the weight is b, the same for every row */
PAIRWISE(FN(sum3), const REAL *restrict a COMMA const REAL *restrict b COMMA const REAL *restrict c, E3, A3)

/* The largest of a[0..n), n >= 1, in 16 lanes so that it vectorizes (a maximum is exact in any order). */
KERNEL static REAL FN(row_max)(const REAL *restrict a, Py_ssize_t n) {
    REAL m[16];
    for (int j = 0; j < 16; j++) m[j] = a[0];
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) m[j] = a[i + j] > m[j] ? a[i + j] : m[j];
    REAL mx = m[0];
    for (int j = 1; j < 16; j++) mx = m[j] > mx ? m[j] : mx;
    for (; i < n; i++) mx = a[i] > mx ? a[i] : mx;
    return mx;
}

/* ---- exp and tanh: one polynomial, no branches, so that the loops around them vectorize ------------ */

#if SUFFIX_IS_F32
#define EXP_LO -87.0f /* 2^-125.5: the result stays normal */
#define EXP_HI 88.0f
#define EXP_SHIFT 0x1.8p23f     /* adding it rounds to an integer, held in the low mantissa bits */
#define LOG2E 0x1.715476p+0f
#define LN2_HI 0.693359375f     /* ln 2 = LN2_HI + LN2_LO; n * LN2_HI is exact (Cody and Waite) */
#define LN2_LO -2.12194440e-4f
#define IBITS int32_t
#define SQRT sqrtf
#define LOG logf
#define EXP_BIAS 127
#define MANT_BITS 23
/* e^r on |r| <= ln2 / 2: Taylor to r^7 (the next term is below 2^-27 of the result) */
static inline __attribute__((always_inline)) REAL FN(exp_poly)(REAL r) {
    return 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
}
#else
#define EXP_LO -708.0
#define EXP_HI 709.0
#define EXP_SHIFT 0x1.8p52
#define LOG2E 0x1.71547652b82fep+0
#define LN2_HI 6.93147180369123816490e-01 /* fdlibm's split */
#define LN2_LO 1.90821492927058770002e-10
#define IBITS int64_t
#define SQRT sqrt
#define LOG log
#define EXP_BIAS 1023
#define MANT_BITS 52
/* e^r on |r| <= ln2 / 2: Taylor to r^13 (the next term is below 2^-57 of the result) */
static inline __attribute__((always_inline)) REAL FN(exp_poly)(REAL r) {
    REAL p = 1.0 / 6227020800.0;
    p = 1.0 / 479001600.0 + r * p;
    p = 1.0 / 39916800.0 + r * p;
    p = 1.0 / 3628800.0 + r * p;
    p = 1.0 / 362880.0 + r * p;
    p = 1.0 / 40320.0 + r * p;
    p = 1.0 / 5040.0 + r * p;
    p = 1.0 / 720.0 + r * p;
    p = 1.0 / 120.0 + r * p;
    p = 1.0 / 24.0 + r * p;
    p = 1.0 / 6.0 + r * p;
    p = 0.5 + r * p;
    p = 1.0 + r * p;
    return 1.0 + r * p;
}
#endif

/* e^x = 2^n e^r with n = round(x / ln 2), r = x - n ln 2; x is clamped where e^x would leave the
 * normal range (a softmax's far tail comes out as the smallest normal instead of 0: no difference
 * to a sum that includes 1). */
static inline __attribute__((always_inline)) REAL FN(exp)(REAL x) {
    x = x < EXP_LO ? EXP_LO : x;
    x = x > EXP_HI ? EXP_HI : x;
    const REAL shift = EXP_SHIFT;
    REAL k = x * LOG2E + shift;
    REAL n = k - shift;
    REAL r = (x - n * LN2_HI) - n * LN2_LO;
    IBITS kb, sb, scale_bits;
    memcpy(&kb, &k, sizeof kb);
    memcpy(&sb, &shift, sizeof sb);
    scale_bits = (IBITS)((kb - sb) + EXP_BIAS) << MANT_BITS;
    REAL scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return FN(exp_poly)(r) * scale;
}

/* tanh u = 1 - 2 / (e^(2u) + 1): saturates to +-1 through the clamp of exp, never NaN. Near 0 it is
 * exact to a unit of 1 (not of u), which is what GELU's 1 + tanh and 1 - tanh^2 need. */
static inline __attribute__((always_inline)) REAL FN(tanh)(REAL u) { return (REAL)1 - (REAL)2 / (FN(exp)((REAL)2 * u) + (REAL)1); }

/* ---- layernorm --------------------------------------------------------------------------------------- */

/* Per row: mean, centred variance, rstd = 1 / sqrt(var + eps), xhat = (x - mean) rstd,
 * out = xhat weight + bias. */
KERNEL static void FN(layernorm_forward)(const REAL *restrict x, const REAL *restrict w, const REAL *restrict b,
                                         REAL *restrict out, REAL *restrict xhat, REAL *restrict rstd,
                                         Py_ssize_t rows, Py_ssize_t d, REAL eps) {
    for (Py_ssize_t i = 0; i < rows; i++) {
        const REAL *xi = x + i * d;
        REAL *hi = xhat + i * d, *oi = out + i * d;
        const REAL mean = FN(sum1)(xi, d) / (REAL)d;
        for (Py_ssize_t j = 0; j < d; j++) hi[j] = xi[j] - mean;
        const REAL var = FN(sum2)(hi, hi, d) / (REAL)d;
        const REAL r = (REAL)1 / SQRT(var + eps);
        rstd[i] = r;
        for (Py_ssize_t j = 0; j < d; j++) {
            hi[j] = hi[j] * r;
            oi[j] = hi[j] * w[j] + b[j];
        }
    }
}

/* dbias = column sums of dout, dweight = column sums of dout xhat (row by row from the first, as
 * numpy sums along axis 0); per row dxhat = dout weight and
 * dx = rstd ((dxhat - mean(dxhat)) - xhat mean(dxhat xhat)), added to `residual` if given (the
 * block's skip connection: dx and residual may be the same array). */
KERNEL static void FN(layernorm_backward)(const REAL *restrict dout, const REAL *restrict xhat,
                                          const REAL *restrict rstd, const REAL *restrict w, REAL *restrict dw,
                                          REAL *restrict db, REAL *dx, const REAL *residual, Py_ssize_t rows,
                                          Py_ssize_t d) {
    for (Py_ssize_t i = 0; i < rows; i++) {
        const REAL *gi = dout + i * d, *hi = xhat + i * d;
        if (i == 0) {
            for (Py_ssize_t j = 0; j < d; j++) {
                db[j] = gi[j];
                dw[j] = gi[j] * hi[j];
            }
        } else {
            for (Py_ssize_t j = 0; j < d; j++) {
                db[j] += gi[j];
                dw[j] += gi[j] * hi[j];
            }
        }
        const REAL m1 = FN(sum2)(gi, w, d) / (REAL)d;
        const REAL m2 = FN(sum3)(gi, w, hi, d) / (REAL)d;
        const REAL r = rstd[i];
        REAL *o = dx + i * d;
        if (residual) {
            const REAL *res = residual + i * d;
            for (Py_ssize_t j = 0; j < d; j++) o[j] = res[j] + r * ((gi[j] * w[j] - m1) - hi[j] * m2);
        } else {
            for (Py_ssize_t j = 0; j < d; j++) o[j] = r * ((gi[j] * w[j] - m1) - hi[j] * m2);
        }
    }
}

/* ---- GELU (tanh approximation) ------------------------------------------------------------------------ */

/* t = tanh(c (x + a x^3)), out = 0.5 x (1 + t); t is kept for backward. */
KERNEL static void FN(gelu_forward)(const REAL *restrict x, REAL *restrict out, REAL *restrict t, Py_ssize_t n) {
    const REAL a = (REAL)GELU_A, c = (REAL)GELU_C;
    for (Py_ssize_t i = 0; i < n; i++) {
        const REAL xi = x[i];
        const REAL ti = FN(tanh)((((xi * xi) * (a * xi)) + xi) * c);
        t[i] = ti;
        out[i] = (ti + (REAL)1) * ((REAL)0.5 * xi);
    }
}

/* dx = dout (0.5 (1 + t) + 0.5 c x (1 + 3 a x^2) (1 - t^2)), written as layers.py orders it. dx may
 * be dout. */
KERNEL static void FN(gelu_backward)(const REAL *dout, const REAL *restrict x, const REAL *restrict t, REAL *dx,
                                     Py_ssize_t n) {
    const REAL a3 = (REAL)(3 * GELU_A), c_half = (REAL)(GELU_C * 0.5);
    for (Py_ssize_t i = 0; i < n; i++) {
        const REAL xi = x[i], ti = t[i];
        REAL slope = ((((xi * xi) * a3 + (REAL)1) * c_half) * xi) * ((REAL)1 - ti * ti);
        slope += (REAL)0.5 * ((REAL)1 + ti);
        dx[i] = slope * dout[i];
    }
}

/* ---- causal softmax of attention scores ----------------------------------------------------------------- */

/* scores: `groups` (T, T) matrices (a batch's heads), in place: row i becomes the softmax of
 * scale * scores[i, 0..i] followed by zeros (the future). */
KERNEL static void FN(causal_softmax_forward)(REAL *s, Py_ssize_t groups, Py_ssize_t T, REAL scale) {
    for (Py_ssize_t g = 0; g < groups; g++) {
        for (Py_ssize_t i = 0; i < T; i++) {
            REAL *row = s + (g * T + i) * T;
            const Py_ssize_t n = i + 1;
            for (Py_ssize_t j = 0; j < n; j++) row[j] *= scale;
            const REAL mx = FN(row_max)(row, n);
            for (Py_ssize_t j = 0; j < n; j++) row[j] = FN(exp)(row[j] - mx);
            const REAL inv = (REAL)1 / FN(sum1)(row, n);
            for (Py_ssize_t j = 0; j < n; j++) row[j] *= inv;
            for (Py_ssize_t j = n; j < T; j++) row[j] = 0;
        }
    }
}

/* dprobs -> dscores in place: ds[i, j] = scale p[i, j] (dp[i, j] - sum_k dp[i, k] p[i, k]) for j <= i,
 * 0 above the diagonal (p is 0 there). */
KERNEL static void FN(causal_softmax_backward)(REAL *restrict dp, const REAL *restrict p, Py_ssize_t groups,
                                               Py_ssize_t T, REAL scale) {
    for (Py_ssize_t g = 0; g < groups; g++) {
        for (Py_ssize_t i = 0; i < T; i++) {
            REAL *drow = dp + (g * T + i) * T;
            const REAL *prow = p + (g * T + i) * T;
            const Py_ssize_t n = i + 1;
            const REAL dot = FN(sum2)(drow, prow, n);
            for (Py_ssize_t j = 0; j < n; j++) drow[j] = (prow[j] * (drow[j] - dot)) * scale;
            for (Py_ssize_t j = n; j < T; j++) drow[j] = 0;
        }
    }
}

/* ---- the loss ------------------------------------------------------------------------------------------- */

/* logits (rows, V) -> probabilities in place; returns the sum over rows of -log p[target] (double). */
KERNEL static double FN(cross_entropy_forward)(REAL *z, const int64_t *restrict targets, Py_ssize_t rows,
                                               Py_ssize_t V) {
    double total = 0;
    for (Py_ssize_t i = 0; i < rows; i++) {
        REAL *row = z + i * V;
        const REAL mx = FN(row_max)(row, V);
        const REAL picked = row[targets[i]] - mx;
        for (Py_ssize_t j = 0; j < V; j++) row[j] = FN(exp)(row[j] - mx);
        const REAL sum = FN(sum1)(row, V);
        for (Py_ssize_t j = 0; j < V; j++) row[j] = row[j] / sum;
        total += (double)(LOG(sum) - picked);
    }
    return total;
}

/* probabilities -> d loss / d logits in place: (p - one_hot(target)) / denominator. */
KERNEL static void FN(cross_entropy_backward)(REAL *p, const int64_t *restrict targets, Py_ssize_t rows, Py_ssize_t V,
                                              REAL denominator) {
    for (Py_ssize_t i = 0; i < rows; i++) {
        REAL *row = p + i * V;
        row[targets[i]] -= (REAL)1;
        for (Py_ssize_t j = 0; j < V; j++) row[j] = row[j] / denominator;
    }
}

/* ---- the embedding's gradient and Adam --------------------------------------------------------------------- */

/* dwte[tokens[i]] += dx[i], row by row in order (np.add.at's order). */
KERNEL static void FN(embedding_backward)(REAL *restrict dwte, const int64_t *restrict tokens,
                                          const REAL *restrict dx, Py_ssize_t rows, Py_ssize_t d) {
    for (Py_ssize_t i = 0; i < rows; i++) {
        REAL *o = dwte + tokens[i] * d;
        const REAL *g = dx + i * d;
        for (Py_ssize_t j = 0; j < d; j++) o[j] += g[j];
    }
}

/* One Adam step over n elements, optim.py's operations in its order:
 * m = m b1 + (1 - b1) g;  v = v b2 + (1 - b2) g^2;  p -= step_size (m / (sqrt(v) / sqrt_bias2 + eps)). */
KERNEL static void FN(adam_step)(REAL *restrict p, const REAL *restrict g, REAL *restrict m, REAL *restrict v,
                                 Py_ssize_t n, const double *k) {
    const REAL b1 = (REAL)k[0], one_b1 = (REAL)k[1], b2 = (REAL)k[2], one_b2 = (REAL)k[3];
    const REAL eps = (REAL)k[4], step = (REAL)k[5], bias2 = (REAL)k[6];
    for (Py_ssize_t i = 0; i < n; i++) {
        const REAL gi = g[i];
        const REAL mi = m[i] * b1 + one_b1 * gi;
        const REAL vi = v[i] * b2 + one_b2 * (gi * gi);
        m[i] = mi;
        v[i] = vi;
        p[i] -= (mi / (SQRT(vi) / bias2 + eps)) * step;
    }
}

#undef E1
#undef E2
#undef E3
#undef A1
#undef A2
#undef A3
#undef EXP_LO
#undef EXP_HI
#undef EXP_SHIFT
#undef LOG2E
#undef LN2_HI
#undef LN2_LO
#undef EXP_BIAS
#undef MANT_BITS
#undef IBITS
#undef SQRT
#undef LOG
