/*
 * _playground_native: the memory lab's timed loops (seed §1.4-1.6).
 *
 * Why C: a Python loop costs ~50 ns per step, which hides an L1 hit (~1 ns) and even a DRAM
 * miss (~100 ns). Each function below releases the GIL while it runs and returns a checksum
 * built from what it loaded, so the compiler cannot drop the loads and a test can check them.
 *
 * pointer chase  link_chain() writes a cyclic list of raw pointers into a buffer in the order
 *                given by Python (one pointer at the start of each slot); chase() walks it,
 *                p = *p, unrolled 100 times as lmbench's lat_mem_rd does, so every load's
 *                address depends on the previous load and neither prefetchers nor out-of-order
 *                execution can overlap two misses. The empty loop's cost is measured and
 *                subtracted (it is ~1 cycle per 100 loads).
 * strided read   strided_sum() reads every stride-th float32 with 8 independent accumulators
 *                (no add dependency chain), one full pass per repeat.
 * gather         gather() copies src[idx[i]] into out[i]; sequential vs random idx shows what
 *                spatial locality and prefetching buy.
 *
 * Times come from CLOCK_MONOTONIC; every function returns the time of each repeat so Python
 * can take the best or the median.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Keeps `v` alive in a register without emitting any instruction. */
#define KEEP(v) __asm__ volatile("" : "+r"(v))

static PyObject *float_list(const double *values, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PyFloat_FromDouble(values[i]);
        if (!f) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, f);
    }
    return list;
}

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *name) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes, got %zd", name, itemsize, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- pointer chase */

PyDoc_STRVAR(link_chain_doc,
"link_chain(buf, order, slot_bytes) -> start_offset\n\n"
"Write a cyclic pointer list into the writable buffer `buf`: the slot order[i] (at byte\n"
"order[i] * slot_bytes) holds the address of slot order[i+1], the last holds the first.\n"
"`order` is an int64 array; if it is a permutation of its slots the list is one cycle.\n"
"Returns the byte offset of the first slot (where chase() starts).");

static PyObject *link_chain(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *order_obj;
    Py_ssize_t slot_bytes;
    if (!PyArg_ParseTuple(args, "OOn", &buf_obj, &order_obj, &slot_bytes)) return NULL;
    if (slot_bytes < (Py_ssize_t)sizeof(void *) || slot_bytes % (Py_ssize_t)sizeof(void *)) {
        PyErr_Format(PyExc_ValueError, "slot_bytes: must be a positive multiple of %zu, got %zd",
                     sizeof(void *), slot_bytes);
        return NULL;
    }
    Py_buffer buf, order;
    if (PyObject_GetBuffer(buf_obj, &buf, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (get_buffer(order_obj, &order, 0, 8, "order") < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const int64_t *ord = (const int64_t *)order.buf;
    Py_ssize_t n = order.len / 8;
    Py_ssize_t num_slots = buf.len / slot_bytes;
    char *base = (char *)buf.buf;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "order: must not be empty");
        goto fail;
    }
    if ((uintptr_t)base % sizeof(void *)) {
        PyErr_SetString(PyExc_ValueError, "buf: must be aligned to a pointer");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ord[i] < 0 || ord[i] >= num_slots) {
            PyErr_Format(PyExc_ValueError, "order[%zd] = %lld is outside the %zd slots of buf",
                         i, (long long)ord[i], num_slots);
            goto fail;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t next = (i + 1 < n) ? i + 1 : 0;
        *(char **)(base + ord[i] * slot_bytes) = base + ord[next] * slot_bytes;
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t start = (Py_ssize_t)ord[0] * slot_bytes;
    PyBuffer_Release(&buf);
    PyBuffer_Release(&order);
    return PyLong_FromSsize_t(start);
fail:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&order);
    return NULL;
}

#define ONE p = *(char **)p;
#define FIVE ONE ONE ONE ONE ONE
#define TEN FIVE FIVE
#define FIFTY TEN TEN TEN TEN TEN
#define HUNDRED FIFTY FIFTY

static char *walk(char *p, Py_ssize_t rounds) {
    for (Py_ssize_t r = 0; r < rounds; r++) {
        HUNDRED
    }
    return p;
}

/* The same loop without the loads: what walk() costs beyond its 100 * rounds loads. */
static double empty_loop_ns(Py_ssize_t rounds) {
    double t0 = now_ns();
    for (Py_ssize_t r = 0; r < rounds; r++) {
        KEEP(r);
    }
    return now_ns() - t0;
}

PyDoc_STRVAR(chase_doc,
"chase(buf, start_offset, num_loads, repeats=3, warmup_loads=-1) -> (ns_per_load, end_offset, overhead_ns)\n\n"
"Walk the list made by link_chain(): p = *p from start_offset, first warmup_loads untimed\n"
"(-1: num_loads) to fill the caches, then `repeats` timed stretches of num_loads, each going\n"
"on from where the last stopped (all counts rounded up to a multiple of 100, the unroll).\n"
"Going on, rather than restarting, keeps every line's reuse distance the whole cycle, as\n"
"lat_mem_rd's full-cycle walks do; restarting would revisit the first lines while they are\n"
"still cached. ns_per_load has one entry per repeat, the empty loop's time subtracted;\n"
"end_offset is where the walk stopped (the checksum: order[total_loads % len(order)] *\n"
"slot_bytes); overhead_ns is the subtracted time per load.");

static PyObject *chase(PyObject *self, PyObject *args) {
    PyObject *buf_obj;
    Py_ssize_t start_offset, num_loads, repeats = 3, warmup_loads = -1;
    if (!PyArg_ParseTuple(args, "Onn|nn", &buf_obj, &start_offset, &num_loads, &repeats, &warmup_loads))
        return NULL;
    if (num_loads <= 0 || repeats <= 0) {
        PyErr_Format(PyExc_ValueError, "num_loads and repeats must be > 0, got %zd and %zd", num_loads, repeats);
        return NULL;
    }
    Py_buffer buf;
    if (PyObject_GetBuffer(buf_obj, &buf, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (start_offset < 0 || start_offset + (Py_ssize_t)sizeof(void *) > buf.len || start_offset % sizeof(void *)) {
        PyErr_Format(PyExc_ValueError, "start_offset %zd is not a pointer slot of the %zd-byte buffer",
                     start_offset, buf.len);
        PyBuffer_Release(&buf);
        return NULL;
    }
    double *times = PyMem_Malloc(sizeof(double) * repeats);
    if (!times) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    char *base = (char *)buf.buf;
    char *start = base + start_offset;
    char *end = start;
    Py_ssize_t rounds = (num_loads + 99) / 100;
    Py_ssize_t loads = rounds * 100;
    Py_ssize_t warm_rounds = ((warmup_loads < 0 ? loads : warmup_loads) + 99) / 100;
    double overhead = 0.0;
    Py_BEGIN_ALLOW_THREADS
    KEEP(start);
    end = walk(start, warm_rounds);
    KEEP(end);
    overhead = empty_loop_ns(rounds);
    for (Py_ssize_t r = 0; r < repeats; r++) {
        double o = empty_loop_ns(rounds);
        if (o < overhead) overhead = o;
    }
    for (Py_ssize_t r = 0; r < repeats; r++) {
        double t0 = now_ns();
        end = walk(end, rounds);
        KEEP(end);
        times[r] = (now_ns() - t0 - overhead) / (double)loads;
    }
    Py_END_ALLOW_THREADS
    /* A wrong pointer would have crashed above; still, check that the walk stayed inside. */
    if (end < base || end >= base + buf.len) {
        PyErr_SetString(PyExc_RuntimeError, "chase left the buffer: the list was not made by link_chain");
        PyMem_Free(times);
        PyBuffer_Release(&buf);
        return NULL;
    }
    PyObject *list = float_list(times, repeats);
    PyMem_Free(times);
    Py_ssize_t end_offset = end - base;
    PyBuffer_Release(&buf);
    if (!list) return NULL;
    return Py_BuildValue("(Nnd)", list, end_offset, overhead / (double)loads);
}

/* ---------------------------------------------------------------- strided read */

PyDoc_STRVAR(strided_sum_doc,
"strided_sum(a, stride_elems, repeats=3) -> (ns_per_pass, checksum)\n\n"
"Sum a[0], a[stride], a[2*stride], ... of the float32 buffer `a`, one full pass per repeat,\n"
"with 8 independent float accumulators. checksum is the (float) sum of one pass.");

static float strided_pass(const float *a, Py_ssize_t n, Py_ssize_t s) {
    float acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0, acc4 = 0, acc5 = 0, acc6 = 0, acc7 = 0;
    Py_ssize_t i = 0;
    for (; i + 7 * s < n; i += 8 * s) {
        acc0 += a[i];
        acc1 += a[i + s];
        acc2 += a[i + 2 * s];
        acc3 += a[i + 3 * s];
        acc4 += a[i + 4 * s];
        acc5 += a[i + 5 * s];
        acc6 += a[i + 6 * s];
        acc7 += a[i + 7 * s];
    }
    for (; i < n; i += s) acc0 += a[i];
    return ((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7));
}

static PyObject *strided_sum(PyObject *self, PyObject *args) {
    PyObject *a_obj;
    Py_ssize_t stride, repeats = 3;
    if (!PyArg_ParseTuple(args, "On|n", &a_obj, &stride, &repeats)) return NULL;
    if (stride <= 0 || repeats <= 0) {
        PyErr_Format(PyExc_ValueError, "stride_elems and repeats must be > 0, got %zd and %zd", stride, repeats);
        return NULL;
    }
    Py_buffer a;
    if (get_buffer(a_obj, &a, 0, 4, "a") < 0) return NULL;
    double *times = PyMem_Malloc(sizeof(double) * repeats);
    if (!times) {
        PyBuffer_Release(&a);
        return PyErr_NoMemory();
    }
    float sum = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < repeats; r++) {
        double t0 = now_ns();
        sum = strided_pass((const float *)a.buf, a.len / 4, stride);
        KEEP(sum);
        times[r] = now_ns() - t0;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&a);
    PyObject *list = float_list(times, repeats);
    PyMem_Free(times);
    if (!list) return NULL;
    return Py_BuildValue("(Nd)", list, (double)sum);
}

/* ---------------------------------------------------------------- copy */

PyDoc_STRVAR(copy_pass_doc,
"copy_pass(dst, src, repeats=3) -> ns_per_pass\n\n"
"memcpy(dst, src) of two buffers of the same length, `repeats` times (GIL released): the C side\n"
"of the machine's copy bandwidth (playground/copybw.py), beside numpy's copyto.");

static PyObject *copy_pass(PyObject *self, PyObject *args) {
    PyObject *dst_obj, *src_obj;
    Py_ssize_t repeats = 3;
    if (!PyArg_ParseTuple(args, "OO|n", &dst_obj, &src_obj, &repeats)) return NULL;
    if (repeats <= 0) {
        PyErr_Format(PyExc_ValueError, "repeats must be > 0, got %zd", repeats);
        return NULL;
    }
    Py_buffer dst, src;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    PyObject *list = NULL;
    double *times = NULL;
    if (dst.len != src.len) {
        PyErr_Format(PyExc_ValueError, "copy_pass: %zd bytes into %zd", src.len, dst.len);
    } else if (!(times = PyMem_Malloc(sizeof(double) * repeats))) {
        PyErr_NoMemory();
    } else {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t r = 0; r < repeats; r++) {
            double t0 = now_ns();
            memcpy(dst.buf, src.buf, dst.len);
            __asm__ volatile("" ::: "memory");
            times[r] = now_ns() - t0;
        }
        Py_END_ALLOW_THREADS
        list = float_list(times, repeats);
    }
    PyMem_Free(times);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    return list;
}

/* ---------------------------------------------------------------- gather */

PyDoc_STRVAR(gather_doc,
"gather(src, idx, out, repeats=3) -> (ns_per_pass, checksum)\n\n"
"out[i] = src[idx[i]] for every i (float32 src/out, int64 idx, len(out) == len(idx)),\n"
"`repeats` times. checksum is the double sum of out after the last pass.");

static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *src_obj, *idx_obj, *out_obj;
    Py_ssize_t repeats = 3;
    if (!PyArg_ParseTuple(args, "OOO|n", &src_obj, &idx_obj, &out_obj, &repeats)) return NULL;
    if (repeats <= 0) {
        PyErr_Format(PyExc_ValueError, "repeats must be > 0, got %zd", repeats);
        return NULL;
    }
    Py_buffer src, idx, out;
    if (get_buffer(src_obj, &src, 0, 4, "src") < 0) return NULL;
    if (get_buffer(idx_obj, &idx, 0, 8, "idx") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (get_buffer(out_obj, &out, 1, 4, "out") < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&idx);
        return NULL;
    }
    PyObject *result = NULL;
    double *times = NULL;
    const float *s = (const float *)src.buf;
    const int64_t *ix = (const int64_t *)idx.buf;
    float *o = (float *)out.buf;
    Py_ssize_t n = idx.len / 8, n_src = src.len / 4;
    if (out.len / 4 != n) {
        PyErr_Format(PyExc_ValueError, "out: needs %zd items (one per index), has %zd", n, out.len / 4);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= n_src) {
            PyErr_Format(PyExc_IndexError, "idx[%zd] = %lld is outside src of %zd items", i, (long long)ix[i], n_src);
            goto done;
        }
    }
    times = PyMem_Malloc(sizeof(double) * repeats);
    if (!times) {
        PyErr_NoMemory();
        goto done;
    }
    double sum = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < repeats; r++) {
        double t0 = now_ns();
        for (Py_ssize_t i = 0; i < n; i++) o[i] = s[ix[i]];
        __asm__ volatile("" ::: "memory");
        times[r] = now_ns() - t0;
    }
    for (Py_ssize_t i = 0; i < n; i++) sum += o[i];
    Py_END_ALLOW_THREADS
    PyObject *list = float_list(times, repeats);
    if (list) result = Py_BuildValue("(Nd)", list, sum);
done:
    PyMem_Free(times);
    PyBuffer_Release(&src);
    PyBuffer_Release(&idx);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"link_chain", link_chain, METH_VARARGS, link_chain_doc},
    {"chase", chase, METH_VARARGS, chase_doc},
    {"strided_sum", strided_sum, METH_VARARGS, strided_sum_doc},
    {"gather", gather, METH_VARARGS, gather_doc},
    {"copy_pass", copy_pass, METH_VARARGS, copy_pass_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_playground_native",
    "Timed memory loops for the memory lab (pointer chase, strided read, gather), the shared-memory "
    "path's mailboxes (mailbox.c), the KV-cache server's attention (attention.c), the simulator's "
    "event core (sim_*.c), the trace's spans (span.c), the transformer's fused kernels (transformer.c); GIL "
    "released while they run or wait.",
    -1, methods,
};

int add_mailbox_type(PyObject *module);        /* mailbox.c: the shared-memory path's messages */
int add_swap_type(PyObject *module);           /* swap.c: its small exchange without a Python frame */
int add_span_types(PyObject *module);          /* span.c: the trace's spans */
int add_attention_functions(PyObject *module); /* attention.c: the KV-cache server's attention */
int add_sim_types(PyObject *module);           /* sim_*.c: the simulator's event core */
int add_comm_core(PyObject *module);           /* comm_core.c: the Communicator's C path */
int add_transformer_functions(PyObject *module); /* transformer.c: the training step's fused kernels */
int add_gemm_functions(PyObject *module);        /* gemm.c: its matrix products through a bound BLAS */
int add_cma_functions(PyObject *module);         /* cma.c: one copy of a peer process's memory */

PyMODINIT_FUNC PyInit__playground_native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (add_mailbox_type(m) < 0 || add_swap_type(m) < 0 || add_span_types(m) < 0 || add_attention_functions(m) < 0 ||
              add_sim_types(m) < 0 || add_comm_core(m) < 0 || add_transformer_functions(m) < 0 ||
              add_gemm_functions(m) < 0 || add_cma_functions(m) < 0))
        Py_CLEAR(m);
    return m;
}
