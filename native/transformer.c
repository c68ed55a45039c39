/*
 * transformer.c: the fused kernels of the numpy transformer's training step (playground/transformer/
 * fused.py calls them; layers.py is the numpy reference each is tested against, tests/
 * test_transformer_kernels.py).
 *
 * Where the time of a step goes that is not a matrix product: layernorm, GELU, the attention's
 * causal softmax, the loss, the embedding's gradient and Adam. numpy runs each as a chain of
 * element-wise operations, one pass over the whole array (and often a temporary) per operation:
 * GELU's forward is eight, Adam's fourteen over the whole model. Here each is one pass, row by row
 * (a row of d, T or V elements stays in the L1 cache between the few sweeps over it), with the
 * softmax's masked half never computed. The matrix products are a BLAS's (gemm.c).
 *
 * Every loop is compiled three times (target_clones: AVX-512, AVX2 and the baseline; one build runs
 * anywhere and picks the widest vectors the CPU has when the module loads) at -O3 without floating
 * point contraction (no fused multiply-add: every sum and product rounds as numpy's does),
 * without errno on sqrt and without floating-point traps (so that sqrt and the branch-free selects
 * vectorize; neither changes a result). `kernel_isa()` says which clone runs.
 * float32 and float64 are one source, transformer_kernels.h, included once per type.
 * The GIL is released while a kernel runs: a training rank's communication thread all-reduces
 * buckets while backward runs these.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#pragma GCC optimize("O3", "no-math-errno", "no-trapping-math", "fp-contract=off")

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KERNEL
#endif

#define COMMA ,
#define GELU_A 0.044715
#define GELU_C 0.79788456080286535588 /* sqrt(2 / pi) */

#define REAL float
#define SUFFIX f32
#define SUFFIX_IS_F32 1
#include "transformer_kernels.h"
#undef REAL
#undef SUFFIX
#undef SUFFIX_IS_F32

#define REAL double
#define SUFFIX f64
#define SUFFIX_IS_F32 0
#include "transformer_kernels.h"
#undef REAL
#undef SUFFIX
#undef SUFFIX_IS_F32

/* ---- arguments -------------------------------------------------------------------------------------- */

enum { REALS, INT64 };

typedef struct {
    Py_buffer views[10];
    int count;
    Py_ssize_t itemsize; /* of the real arrays: 4 or 8, the first one's */
} Args;

static void release(Args *a) {
    for (int i = 0; i < a->count; i++) PyBuffer_Release(&a->views[i]);
    a->count = 0;
}

/* The next argument's buffer: C-contiguous, float32 or float64 like the first (REALS) or int64. */
static Py_buffer *take(Args *a, PyObject *obj, int writable, int kind, const char *name) {
    Py_buffer *v = &a->views[a->count];
    int flags = (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_GetBuffer(obj, v, flags) < 0) return NULL;
    a->count++;
    const char f = v->format ? v->format[strlen(v->format) - 1] : 'B';
    if (kind == INT64) {
        if (v->itemsize != 8 || !strchr("lqLQ", f)) {
            PyErr_Format(PyExc_TypeError, "%s: expected int64, got format '%s'", name, v->format);
            return NULL;
        }
        return v;
    }
    if (!((f == 'f' && v->itemsize == 4) || (f == 'd' && v->itemsize == 8))) {
        PyErr_Format(PyExc_TypeError, "%s: expected float32 or float64, got format '%s'", name, v->format);
        return NULL;
    }
    if (a->itemsize == 0) a->itemsize = v->itemsize;
    if (v->itemsize != a->itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected the same dtype as the first array", name);
        return NULL;
    }
    return v;
}

static Py_ssize_t elements(const Py_buffer *v) { return v->len / v->itemsize; }

static PyObject *fail(Args *a, const char *message) {
    if (message) PyErr_SetString(PyExc_ValueError, message);
    release(a);
    return NULL;
}

static PyObject *done(Args *a) {
    release(a);
    Py_RETURN_NONE;
}

#define DISPATCH(a, CALL32, CALL64)                                                                         \
    do {                                                                                                    \
        Py_BEGIN_ALLOW_THREADS if ((a)->itemsize == 4) { CALL32; }                                          \
        else { CALL64; }                                                                                    \
        Py_END_ALLOW_THREADS                                                                                \
    } while (0)

#define F32(p) ((float *)(p)->buf)
#define F64(p) ((double *)(p)->buf)
#define I64(p) ((const int64_t *)(p)->buf)

/* ---- the functions ------------------------------------------------------------------------------------ */

PyDoc_STRVAR(layernorm_forward_doc,
"layernorm_forward(x, weight, bias, out, xhat, rstd, eps)\n\n"
"Per row of x (rows, d): out = xhat weight + bias, xhat = (x - mean) rstd, rstd = 1 / sqrt(var + eps)\n"
"(rstd: rows elements). float32 or float64, all alike; numpy's bits.");

static PyObject *layernorm_forward(PyObject *self, PyObject *args) {
    PyObject *o[6];
    double eps;
    if (!PyArg_ParseTuple(args, "OOOOOOd", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &eps)) return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *x, *w, *b, *out, *xhat, *rstd;
    if (!(x = take(&a, o[0], 0, REALS, "x")) || !(w = take(&a, o[1], 0, REALS, "weight")) ||
        !(b = take(&a, o[2], 0, REALS, "bias")) || !(out = take(&a, o[3], 1, REALS, "out")) ||
        !(xhat = take(&a, o[4], 1, REALS, "xhat")) || !(rstd = take(&a, o[5], 1, REALS, "rstd")))
        return fail(&a, NULL);
    const Py_ssize_t d = elements(w), n = elements(x), rows = d ? n / d : 0;
    if (d == 0 || elements(b) != d || n % d || elements(out) != n || elements(xhat) != n || elements(rstd) != rows)
        return fail(&a, "layernorm_forward: x, out, xhat (rows, d); weight, bias (d,); rstd (rows,)");
    DISPATCH(&a, layernorm_forward_f32(F32(x), F32(w), F32(b), F32(out), F32(xhat), F32(rstd), rows, d, (float)eps),
             layernorm_forward_f64(F64(x), F64(w), F64(b), F64(out), F64(xhat), F64(rstd), rows, d, eps));
    return done(&a);
}

PyDoc_STRVAR(layernorm_backward_doc,
"layernorm_backward(dout, xhat, rstd, weight, dweight, dbias, dx, residual)\n\n"
"The layernorm's gradients from dout (rows, d): dweight and dbias (d,) written, dx (rows, d) =\n"
"residual + the input's gradient (residual None: the gradient alone; dx may be residual).");

static PyObject *layernorm_backward(PyObject *self, PyObject *args) {
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7])) return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *dout, *xhat, *rstd, *w, *dw, *db, *dx, *res = NULL;
    if (!(dout = take(&a, o[0], 0, REALS, "dout")) || !(xhat = take(&a, o[1], 0, REALS, "xhat")) ||
        !(rstd = take(&a, o[2], 0, REALS, "rstd")) || !(w = take(&a, o[3], 0, REALS, "weight")) ||
        !(dw = take(&a, o[4], 1, REALS, "dweight")) || !(db = take(&a, o[5], 1, REALS, "dbias")) ||
        !(dx = take(&a, o[6], 1, REALS, "dx")) || (o[7] != Py_None && !(res = take(&a, o[7], 0, REALS, "residual"))))
        return fail(&a, NULL);
    const Py_ssize_t d = elements(w), n = elements(dout), rows = d ? n / d : 0;
    if (d == 0 || n % d || rows == 0 || elements(xhat) != n || elements(rstd) != rows || elements(dw) != d ||
        elements(db) != d || elements(dx) != n || (res && elements(res) != n))
        return fail(&a, "layernorm_backward: dout, xhat, dx, residual (rows >= 1, d); rstd (rows,); weight, "
                        "dweight, dbias (d,)");
    DISPATCH(&a,
             layernorm_backward_f32(F32(dout), F32(xhat), F32(rstd), F32(w), F32(dw), F32(db), F32(dx),
                                    res ? F32(res) : NULL, rows, d),
             layernorm_backward_f64(F64(dout), F64(xhat), F64(rstd), F64(w), F64(dw), F64(db), F64(dx),
                                    res ? F64(res) : NULL, rows, d));
    return done(&a);
}

PyDoc_STRVAR(gelu_forward_doc,
"gelu_forward(x, out, t)\n\n"
"GPT-2's GELU: t = tanh(sqrt(2/pi) (x + 0.044715 x^3)), out = 0.5 x (1 + t), element-wise.");

static PyObject *gelu_forward(PyObject *self, PyObject *args) {
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *x, *out, *t;
    if (!(x = take(&a, o[0], 0, REALS, "x")) || !(out = take(&a, o[1], 1, REALS, "out")) ||
        !(t = take(&a, o[2], 1, REALS, "t")))
        return fail(&a, NULL);
    const Py_ssize_t n = elements(x);
    if (elements(out) != n || elements(t) != n) return fail(&a, "gelu_forward: x, out and t must be alike");
    DISPATCH(&a, gelu_forward_f32(F32(x), F32(out), F32(t), n), gelu_forward_f64(F64(x), F64(out), F64(t), n));
    return done(&a);
}

PyDoc_STRVAR(gelu_backward_doc,
"gelu_backward(dout, x, t, dx)\n\n"
"GELU's input gradient from dout, the input x and the forward's t; dx may be dout.");

static PyObject *gelu_backward(PyObject *self, PyObject *args) {
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *dout, *x, *t, *dx;
    if (!(dout = take(&a, o[0], 0, REALS, "dout")) || !(x = take(&a, o[1], 0, REALS, "x")) ||
        !(t = take(&a, o[2], 0, REALS, "t")) || !(dx = take(&a, o[3], 1, REALS, "dx")))
        return fail(&a, NULL);
    const Py_ssize_t n = elements(x);
    if (elements(dout) != n || elements(t) != n || elements(dx) != n)
        return fail(&a, "gelu_backward: dout, x, t and dx must be alike");
    DISPATCH(&a, gelu_backward_f32(F32(dout), F32(x), F32(t), F32(dx), n),
             gelu_backward_f64(F64(dout), F64(x), F64(t), F64(dx), n));
    return done(&a);
}

PyDoc_STRVAR(causal_softmax_forward_doc,
"causal_softmax_forward(scores, T, scale)\n\n"
"scores: (groups, T, T) in place; row i becomes softmax(scale * scores[i, :i+1]) and zeros after.");

static PyObject *causal_softmax_forward(PyObject *self, PyObject *args) {
    PyObject *o;
    Py_ssize_t T;
    double scale;
    if (!PyArg_ParseTuple(args, "Ond", &o, &T, &scale)) return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *s;
    if (!(s = take(&a, o, 1, REALS, "scores"))) return fail(&a, NULL);
    const Py_ssize_t n = elements(s);
    if (T < 1 || n % (T * T)) return fail(&a, "causal_softmax_forward: scores must be (groups, T, T)");
    const Py_ssize_t groups = n / (T * T);
    DISPATCH(&a, causal_softmax_forward_f32(F32(s), groups, T, (float)scale),
             causal_softmax_forward_f64(F64(s), groups, T, scale));
    return done(&a);
}

PyDoc_STRVAR(causal_softmax_backward_doc,
"causal_softmax_backward(dprobs, probs, T, scale)\n\n"
"dprobs (groups, T, T) -> the scores' gradient, in place, from the forward's probs.");

static PyObject *causal_softmax_backward(PyObject *self, PyObject *args) {
    PyObject *o[2];
    Py_ssize_t T;
    double scale;
    if (!PyArg_ParseTuple(args, "OOnd", &o[0], &o[1], &T, &scale)) return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *dp, *p;
    if (!(dp = take(&a, o[0], 1, REALS, "dprobs")) || !(p = take(&a, o[1], 0, REALS, "probs")))
        return fail(&a, NULL);
    const Py_ssize_t n = elements(dp);
    if (T < 1 || n % (T * T) || elements(p) != n)
        return fail(&a, "causal_softmax_backward: dprobs and probs must be (groups, T, T)");
    const Py_ssize_t groups = n / (T * T);
    DISPATCH(&a, causal_softmax_backward_f32(F32(dp), F32(p), groups, T, (float)scale),
             causal_softmax_backward_f64(F64(dp), F64(p), groups, T, scale));
    return done(&a);
}

/* targets (rows,) int64 in [0, V) for logits (rows, V) */
static int check_targets(const Py_buffer *t, Py_ssize_t rows, Py_ssize_t V) {
    const int64_t *tt = I64(t);
    for (Py_ssize_t i = 0; i < rows; i++)
        if (tt[i] < 0 || tt[i] >= V) {
            PyErr_Format(PyExc_IndexError, "target %lld of row %zd is outside 0..%zd", (long long)tt[i], i, V - 1);
            return -1;
        }
    return 0;
}

PyDoc_STRVAR(cross_entropy_forward_doc,
"cross_entropy_forward(logits, targets) -> float\n\n"
"logits (rows, V) become the softmax probabilities, in place; returns the sum over rows of\n"
"-log p[target] (targets: rows int64).");

static PyObject *cross_entropy_forward(PyObject *self, PyObject *args) {
    PyObject *o[2];
    if (!PyArg_ParseTuple(args, "OO", &o[0], &o[1])) return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *z, *t;
    if (!(z = take(&a, o[0], 1, REALS, "logits")) || !(t = take(&a, o[1], 0, INT64, "targets")))
        return fail(&a, NULL);
    const Py_ssize_t rows = elements(t), n = elements(z), V = rows ? n / rows : 0;
    if (rows == 0 || V == 0 || n % rows) return fail(&a, "cross_entropy_forward: logits (rows, V), targets (rows,)");
    if (check_targets(t, rows, V) < 0) return fail(&a, NULL);
    double total = 0;
    DISPATCH(&a, total = cross_entropy_forward_f32(F32(z), I64(t), rows, V),
             total = cross_entropy_forward_f64(F64(z), I64(t), rows, V));
    release(&a);
    return PyFloat_FromDouble(total);
}

PyDoc_STRVAR(cross_entropy_backward_doc,
"cross_entropy_backward(probs, targets, denominator)\n\n"
"probs (rows, V) -> (probs - one_hot(targets)) / denominator, in place.");

static PyObject *cross_entropy_backward(PyObject *self, PyObject *args) {
    PyObject *o[2];
    double denominator;
    if (!PyArg_ParseTuple(args, "OOd", &o[0], &o[1], &denominator)) return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *p, *t;
    if (!(p = take(&a, o[0], 1, REALS, "probs")) || !(t = take(&a, o[1], 0, INT64, "targets")))
        return fail(&a, NULL);
    const Py_ssize_t rows = elements(t), n = elements(p), V = rows ? n / rows : 0;
    if (rows == 0 || V == 0 || n % rows) return fail(&a, "cross_entropy_backward: probs (rows, V), targets (rows,)");
    if (check_targets(t, rows, V) < 0) return fail(&a, NULL);
    DISPATCH(&a, cross_entropy_backward_f32(F32(p), I64(t), rows, V, (float)denominator),
             cross_entropy_backward_f64(F64(p), I64(t), rows, V, denominator));
    return done(&a);
}

PyDoc_STRVAR(embedding_backward_doc,
"embedding_backward(dwte, tokens, dx)\n\n"
"dwte[tokens[i]] += dx[i] for each row i of dx (rows, d), in order (np.add.at's).");

static PyObject *embedding_backward(PyObject *self, PyObject *args) {
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *dwte, *tok, *dx;
    if (!(dwte = take(&a, o[0], 1, REALS, "dwte")) || !(tok = take(&a, o[1], 0, INT64, "tokens")) ||
        !(dx = take(&a, o[2], 0, REALS, "dx")))
        return fail(&a, NULL);
    const Py_ssize_t rows = elements(tok), n = elements(dx), d = rows ? n / rows : 0;
    if (rows == 0 || d == 0 || n % rows || elements(dwte) % d)
        return fail(&a, "embedding_backward: dwte (V, d), tokens (rows,), dx (rows, d)");
    if (check_targets(tok, rows, elements(dwte) / d) < 0) return fail(&a, NULL);
    DISPATCH(&a, embedding_backward_f32(F32(dwte), I64(tok), F32(dx), rows, d),
             embedding_backward_f64(F64(dwte), I64(tok), F64(dx), rows, d));
    return done(&a);
}

PyDoc_STRVAR(adam_step_doc,
"adam_step(params, grads, m, v, beta1, beta2, eps, step_size, sqrt_bias2)\n\n"
"One Adam step in place over 1-d arrays alike: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,\n"
"params -= step_size m / (sqrt(v) / sqrt_bias2 + eps), each constant rounded to the dtype.");

static PyObject *adam_step(PyObject *self, PyObject *args) {
    PyObject *o[4];
    double b1, b2, eps, step, bias2;
    if (!PyArg_ParseTuple(args, "OOOOddddd", &o[0], &o[1], &o[2], &o[3], &b1, &b2, &eps, &step, &bias2))
        return NULL;
    Args a = {.count = 0, .itemsize = 0};
    Py_buffer *p, *g, *m, *v;
    if (!(p = take(&a, o[0], 1, REALS, "params")) || !(g = take(&a, o[1], 0, REALS, "grads")) ||
        !(m = take(&a, o[2], 1, REALS, "m")) || !(v = take(&a, o[3], 1, REALS, "v")))
        return fail(&a, NULL);
    const Py_ssize_t n = elements(p);
    if (elements(g) != n || elements(m) != n || elements(v) != n)
        return fail(&a, "adam_step: params, grads, m and v must be alike");
    const double k[7] = {b1, 1 - b1, b2, 1 - b2, eps, step, bias2};
    DISPATCH(&a, adam_step_f32(F32(p), F32(g), F32(m), F32(v), n, k), adam_step_f64(F64(p), F64(g), F64(m), F64(v), n, k));
    return done(&a);
}

PyDoc_STRVAR(kernel_isa_doc, "kernel_isa() -> str\n\nThe vector instructions these kernels run with here: avx512f, avx2 or baseline.");

static PyObject *kernel_isa(PyObject *self, PyObject *unused) {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return PyUnicode_FromString("avx512f");
    if (__builtin_cpu_supports("avx2")) return PyUnicode_FromString("avx2");
#endif
    return PyUnicode_FromString("baseline");
}

static PyMethodDef transformer_methods[] = {
    {"layernorm_forward", layernorm_forward, METH_VARARGS, layernorm_forward_doc},
    {"layernorm_backward", layernorm_backward, METH_VARARGS, layernorm_backward_doc},
    {"gelu_forward", gelu_forward, METH_VARARGS, gelu_forward_doc},
    {"gelu_backward", gelu_backward, METH_VARARGS, gelu_backward_doc},
    {"causal_softmax_forward", causal_softmax_forward, METH_VARARGS, causal_softmax_forward_doc},
    {"causal_softmax_backward", causal_softmax_backward, METH_VARARGS, causal_softmax_backward_doc},
    {"cross_entropy_forward", cross_entropy_forward, METH_VARARGS, cross_entropy_forward_doc},
    {"cross_entropy_backward", cross_entropy_backward, METH_VARARGS, cross_entropy_backward_doc},
    {"embedding_backward", embedding_backward, METH_VARARGS, embedding_backward_doc},
    {"adam_step", adam_step, METH_VARARGS, adam_step_doc},
    {"kernel_isa", kernel_isa, METH_NOARGS, kernel_isa_doc},
    {NULL, NULL, 0, NULL},
};

int add_transformer_functions(PyObject *module) { return PyModule_AddFunctions(module, transformer_methods); }
