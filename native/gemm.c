/*
 * gemm.c: the transformer's matrix products through a CBLAS found at run time (playground/
 * transformer/fused.py binds it: numpy's own OpenBLAS, or MKL when the `mkl` package is installed;
 * docs/transformer.md says why the choice matters).
 *
 * numpy's matmul is a BLAS call too, but it can only ask for C = A B: OpenBLAS then zeroes C in a
 * pass of its own before the product (beta = 0), and a linear layer adds its bias and the block's
 * residual in two more passes. `linear_forward` fills C with bias (+ residual) and asks the BLAS
 * for C += A B (beta = 1): one pass. `matmul` is numpy's matmul on the bound library: any view whose
 * matrices have a unit stride along one of their two axes (a transpose is a flag, not a copy), in
 * a batch of up to two leading axes (attention's batch x heads), one gemm a matrix.
 *
 * Which library: `blas_bind(path)` opens it (or finds it open) and looks up the CBLAS gemm by the
 * names the known builds export: numpy's OpenBLAS (prefixed, 64-bit integers), other 64-bit
 * builds, and the usual LP64 name (MKL, a system OpenBLAS). The GIL is released around every call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

typedef void (*gemm64_f32)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                           int64_t, float, float *, int64_t);
typedef void (*gemm64_f64)(int, int, int, int64_t, int64_t, int64_t, double, const double *, int64_t,
                           const double *, int64_t, double, double *, int64_t);
typedef void (*gemm32_f32)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                           float *, int);
typedef void (*gemm32_f64)(int, int, int, int, int, int, double, const double *, int, const double *, int, double,
                           double *, int);

static struct {
    void *sgemm, *dgemm;
    int ilp64; /* 64-bit integer arguments */
} blas;

static const struct {
    const char *s, *d;
    int ilp64;
} BLAS_NAMES[] = {
    {"scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", 1}, /* numpy's and scipy's OpenBLAS wheels */
    {"cblas_sgemm64_", "cblas_dgemm64_", 1},
    {"cblas_sgemm", "cblas_dgemm", 0}, /* MKL's mkl_rt, a system OpenBLAS, BLIS */
};

PyDoc_STRVAR(blas_bind_doc,
"blas_bind(path) -> str or None\n\n"
"Open the library at `path` (or find it open) and bind matmul and linear_forward to its CBLAS\n"
"gemm; returns the symbol bound, or None (nothing changes).");

static PyObject *blas_bind(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) Py_RETURN_NONE;
    for (size_t i = 0; i < sizeof BLAS_NAMES / sizeof BLAS_NAMES[0]; i++) {
        void *s = dlsym(lib, BLAS_NAMES[i].s), *d = dlsym(lib, BLAS_NAMES[i].d);
        if (s && d) {
            blas.sgemm = s;
            blas.dgemm = d;
            blas.ilp64 = BLAS_NAMES[i].ilp64;
            return PyUnicode_FromString(BLAS_NAMES[i].s);
        }
    }
    dlclose(lib);
    Py_RETURN_NONE;
}

/* One row-major gemm: C (m x n, ldc) = alpha op(A) op(B) + beta C; a flag says float32 or float64. */
static void gemm(int f32, int ta, int tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, const void *a, Py_ssize_t lda,
                 const void *b, Py_ssize_t ldb, double beta, void *c, Py_ssize_t ldc) {
    const int A = ta ? TRANS : NO_TRANS, B = tb ? TRANS : NO_TRANS;
    if (f32 && blas.ilp64)
        ((gemm64_f32)blas.sgemm)(ROW_MAJOR, A, B, m, n, k, 1.0f, a, lda, b, ldb, (float)beta, c, ldc);
    else if (f32)
        ((gemm32_f32)blas.sgemm)(ROW_MAJOR, A, B, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, (float)beta,
                                 c, (int)ldc);
    else if (blas.ilp64)
        ((gemm64_f64)blas.dgemm)(ROW_MAJOR, A, B, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
    else
        ((gemm32_f64)blas.dgemm)(ROW_MAJOR, A, B, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, beta, c,
                                 (int)ldc);
}

/* A matrix of a strided view: its rows and columns, whether it is stored transposed, its leading
 * dimension (elements); 0 if neither axis has a unit stride (the BLAS cannot read it in place). */
typedef struct {
    Py_ssize_t rows, cols, ld;
    int trans;
} Matrix;

static int matrix_of(const Py_buffer *v, Matrix *m) {
    const int nd = v->ndim;
    const Py_ssize_t item = v->itemsize, s0 = v->strides[nd - 2], s1 = v->strides[nd - 1];
    m->rows = v->shape[nd - 2];
    m->cols = v->shape[nd - 1];
    if (s1 == item && s0 % item == 0 && s0 / item >= (m->cols > 1 ? m->cols : 1)) {
        m->trans = 0;
        m->ld = s0 / item;
        return 1;
    }
    if (s0 == item && s1 % item == 0 && s1 / item >= (m->rows > 1 ? m->rows : 1)) {
        m->trans = 1;
        m->ld = s1 / item;
        return 1;
    }
    return 0;
}

static int get_strided(PyObject *obj, Py_buffer *v, int writable) {
    return PyObject_GetBuffer(obj, v, (writable ? PyBUF_WRITABLE : 0) | PyBUF_STRIDES | PyBUF_FORMAT);
}

static int real_format(const Py_buffer *v) {
    const char f = v->format ? v->format[strlen(v->format) - 1] : 'B';
    return (f == 'f' && v->itemsize == 4) || (f == 'd' && v->itemsize == 8);
}

PyDoc_STRVAR(matmul_doc,
"matmul(a, b, out) -> bool\n\n"
"out = a @ b for views of 2 to 4 dimensions alike (the leading ones a batch, the same in all\n"
"three), float32 or float64, each matrix with a unit stride along one axis (out along its rows);\n"
"False (nothing written) when they are not such views or no BLAS is bound.");

static PyObject *matmul(PyObject *self, PyObject *args) {
    PyObject *oa, *ob, *oc;
    if (!PyArg_ParseTuple(args, "OOO", &oa, &ob, &oc)) return NULL;
    if (!blas.sgemm) Py_RETURN_FALSE;
    Py_buffer va, vb, vc;
    if (get_strided(oa, &va, 0) < 0) return NULL;
    if (get_strided(ob, &vb, 0) < 0) {
        PyBuffer_Release(&va);
        return NULL;
    }
    if (get_strided(oc, &vc, 1) < 0) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        return NULL;
    }
    PyObject *result = Py_False;
    Matrix A, B, C;
    const int nd = va.ndim;
    int ok = nd >= 2 && nd <= 4 && vb.ndim == nd && vc.ndim == nd && real_format(&va) &&
             va.itemsize == vb.itemsize && va.itemsize == vc.itemsize && real_format(&vb) && real_format(&vc) &&
             matrix_of(&va, &A) && matrix_of(&vb, &B) && matrix_of(&vc, &C) && !C.trans && A.cols == B.rows &&
             C.rows == A.rows && C.cols == B.cols;
    for (int d = 0; ok && d < nd - 2; d++) ok = va.shape[d] == vb.shape[d] && va.shape[d] == vc.shape[d];
    if (ok) {
        const Py_ssize_t n0 = nd > 2 ? va.shape[0] : 1, n1 = nd > 3 ? va.shape[1] : 1;
        const int f32 = va.itemsize == 4;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n0; i++)
            for (Py_ssize_t j = 0; j < n1; j++) {
                Py_ssize_t oa_ = 0, ob_ = 0, oc_ = 0;
                if (nd > 2) oa_ += i * va.strides[0], ob_ += i * vb.strides[0], oc_ += i * vc.strides[0];
                if (nd > 3) oa_ += j * va.strides[1], ob_ += j * vb.strides[1], oc_ += j * vc.strides[1];
                if (A.rows && B.cols)
                    gemm(f32, A.trans, B.trans, A.rows, B.cols, A.cols, (char *)va.buf + oa_, A.ld,
                         (char *)vb.buf + ob_, B.ld, 0.0, (char *)vc.buf + oc_, C.ld);
            }
        Py_END_ALLOW_THREADS
        result = Py_True;
    }
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&vc);
    return Py_NewRef(result);
}

/* out[i] = bias (+ residual[i]) for each row: what the product is then added to */
#define FILL_ROWS(T)                                                                                        \
    static void fill_rows_##T(const T *bias, const T *res, T *out, Py_ssize_t rows, Py_ssize_t n) {          \
        for (Py_ssize_t i = 0; i < rows; i++) {                                                             \
            T *o = out + i * n;                                                                             \
            if (res)                                                                                        \
                for (Py_ssize_t j = 0; j < n; j++) o[j] = res[i * n + j] + bias[j];                         \
            else                                                                                            \
                memcpy(o, bias, n * sizeof(T));                                                             \
        }                                                                                                   \
    }
FILL_ROWS(float)
FILL_ROWS(double)

PyDoc_STRVAR(linear_forward_doc,
"linear_forward(x, weight, bias, residual, out) -> bool\n\n"
"out (rows, n) = residual + bias + x (rows, k) @ weight (k, n), all C-contiguous and alike: out is\n"
"filled with the bias (plus the residual, unless None) and the BLAS adds the product (beta = 1).\n"
"False (nothing written) when no BLAS is bound.");

static PyObject *linear_forward(PyObject *self, PyObject *args) {
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    if (!blas.sgemm) Py_RETURN_FALSE;
    Py_buffer v[5];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 5; got++) {
        if (got == 3 && o[3] == Py_None) {
            v[3].buf = NULL;
            v[3].len = 0;
            v[3].obj = NULL;
            continue;
        }
        int flags = (got == 4 ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
        if (PyObject_GetBuffer(o[got], &v[got], flags) < 0) goto done;
        if (!real_format(&v[got]) || v[got].itemsize != v[0].itemsize) {
            PyErr_SetString(PyExc_TypeError, "linear_forward: float32 or float64 arrays, all alike");
            got++;
            goto done;
        }
    }
    const Py_ssize_t item = v[0].itemsize, n = v[2].len / item, k = n ? v[1].len / item / n : 0;
    const Py_ssize_t rows = k ? v[0].len / item / k : 0;
    if (n == 0 || k == 0 || v[1].len != k * n * item || v[0].len != rows * k * item || v[4].len != rows * n * item ||
        (v[3].buf && v[3].len != v[4].len)) {
        PyErr_SetString(PyExc_ValueError, "linear_forward: x (rows, k), weight (k, n), bias (n,), residual and out (rows, n)");
        goto done;
    }
    const int f32 = item == 4;
    Py_BEGIN_ALLOW_THREADS
    if (f32)
        fill_rows_float(v[2].buf, v[3].buf, v[4].buf, rows, n);
    else
        fill_rows_double(v[2].buf, v[3].buf, v[4].buf, rows, n);
    if (rows) gemm(f32, 0, 0, rows, n, k, v[0].buf, k, v[1].buf, n, 1.0, v[4].buf, n);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_True);
done:
    for (int i = 0; i < got; i++)
        if (v[i].obj) PyBuffer_Release(&v[i]);
    return result;
}

static PyMethodDef gemm_methods[] = {
    {"blas_bind", blas_bind, METH_VARARGS, blas_bind_doc},
    {"matmul", matmul, METH_VARARGS, matmul_doc},
    {"linear_forward", linear_forward, METH_VARARGS, linear_forward_doc},
    {NULL, NULL, 0, NULL},
};

int add_gemm_functions(PyObject *module) { return PyModule_AddFunctions(module, gemm_methods); }
