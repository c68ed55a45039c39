/*
 * attention.c: decode attention over the KV-cache server's pool, reading each sequence's keys and
 * values where its allocation policy put them (playground/kvcache/engine/attention.py is the contract
 * and the numpy twin; docs/results/serving.md has the measurements).
 *
 *   out[i, h] = softmax(q[i, h] . K_i[t, h] / sqrt(hd), over t < n_i) V_i[:, h]
 *
 * keys and values are one layer's planes, (slots, H, hd) float32: slot s is H * hd floats at
 * s * H * hd. Sequence i owns tables[starts[i] .. starts[i + 1]):
 *   block_size > 0 (paged): its block table; token p is in slot table[p / bs] * bs + p % bs, so a
 *                  block is one run of bs slots and the kernel jumps from block to block, as
 *                  vLLM's PagedAttention kernel does;
 *   block_size = 0 (contiguous, reserve-max): one entry, the slot of token 0; the tokens are one
 *                  run, read in chunks of CHUNK_TOKENS as if they were blocks lying in order.
 * Pass 1 reads the keys (scores, each head's maximum), pass 2 turns the scores into exp(score -
 * max) and their sums (double), pass 3 reads the values and accumulates them weighted. Dot
 * products use 8 independent accumulators and the weighted sums are written 8 floats at a time,
 * so that -O2 makes vector instructions of both.
 *
 * Both layouts go through the same loop, run by run (a block, or a chunk of the contiguous run), so
 * that paged / contiguous measures where the blocks lie and nothing else.
 * Streams. A run read from start to end is what the hardware prefetcher follows; at the end of a
 * block it cannot know where the next one is, and it takes a few misses to pick the next run up.
 * So both passes read `streams` runs at once, token j of each in turn: the prefetcher follows
 * several runs and their restarts overlap, as the warps of vLLM's kernel read different blocks at
 * once. streams = 0 picks enough that one row of each makes 2 KiB in flight (FRONT_BYTES).
 * Prefetch. While row j of this group's runs is read, row j of the next group's is prefetched
 * (into L2: prefetcht2, which leaves the L1's few fill buffers to the loads), so the next block's
 * lines are on their way before the jump to it: the block table says where it is, the hardware
 * prefetcher cannot. A contiguous run gets the same, one chunk ahead.
 *
 * Everything is checked before the GIL is released: a slot outside the planes is an IndexError
 * naming the sequence, never a read out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

static int get_view(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *name) {
    int flags = (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    if (view->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes, got %zd", name, itemsize, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static inline float dot(const float *restrict a, const float *restrict b, Py_ssize_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
        s4 += a[i + 4] * b[i + 4];
        s5 += a[i + 5] * b[i + 5];
        s6 += a[i + 6] * b[i + 6];
        s7 += a[i + 7] * b[i + 7];
    }
    float s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* o += w * x, n floats; written out 8 at a time so that the compiler's straight-line vectoriser
 * turns each group into vector instructions at -O2 (its loop vectoriser does not, there). */
static inline void axpy(float *restrict o, float w, const float *restrict x, Py_ssize_t n) {
    Py_ssize_t d = 0;
    for (; d + 8 <= n; d += 8) {
        o[d] += w * x[d];
        o[d + 1] += w * x[d + 1];
        o[d + 2] += w * x[d + 2];
        o[d + 3] += w * x[d + 3];
        o[d + 4] += w * x[d + 4];
        o[d + 5] += w * x[d + 5];
        o[d + 6] += w * x[d + 6];
        o[d + 7] += w * x[d + 7];
    }
    for (; d < n; d++) o[d] += w * x[d];
}

typedef struct {
    const float *keys, *values;
    const int64_t *tables, *starts, *lens;
    Py_ssize_t block_size, heads, head_dim;
    Py_ssize_t streams; /* runs read at once */
} Pool;

#define MAX_STREAMS 16
#define FRONT_BYTES 2048
#define CHUNK_TOKENS 16

/* Blocks read at once: enough that one row of each makes 2 KiB of loads in flight (rows of 2 KiB: one). */
static Py_ssize_t auto_streams(Py_ssize_t row_bytes) {
    Py_ssize_t s = FRONT_BYTES / row_bytes;
    return s < 1 ? 1 : (s > MAX_STREAMS ? MAX_STREAMS : s);
}

/* The slot of the first token of run r of a sequence whose table is `t`. */
static inline int64_t run_slot(const Pool *p, const int64_t *t, Py_ssize_t r) {
    return p->block_size ? t[r] * p->block_size : t[0] + r * CHUNK_TOKENS;
}

/* The runs r0 .. r0 + streams of a sequence (table t, n tokens): where each starts in `plane`, how
 * many tokens it holds, and where its scores go. */
typedef struct {
    Py_ssize_t count;
    const float *rows[MAX_STREAMS];
    float *scores[MAX_STREAMS];
    Py_ssize_t len[MAX_STREAMS];
} Group;

static void group(const Pool *p, const int64_t *t, const float *plane, Py_ssize_t r0, Py_ssize_t num_runs,
                  Py_ssize_t run_len, Py_ssize_t n, float *scores, Group *g) {
    const Py_ssize_t row = p->heads * p->head_dim;
    g->count = r0 >= num_runs ? 0 : (num_runs - r0 < p->streams ? num_runs - r0 : p->streams);
    for (Py_ssize_t x = 0; x < g->count; x++) {
        const Py_ssize_t first = (r0 + x) * run_len;
        g->len[x] = n - first < run_len ? n - first : run_len;
        g->rows[x] = plane + run_slot(p, t, r0 + x) * row;
        g->scores[x] = scores + first * p->heads;
    }
}

/* Row j of every run of the next group, into the cache while this group is read: the jump to a
 * block somewhere else costs no wait when its turn comes. */
static inline void prefetch_rows(const Group *next, Py_ssize_t j, Py_ssize_t row) {
    for (Py_ssize_t x = 0; x < next->count; x++) {
        if (j >= next->len[x]) continue;
        const char *r = (const char *)(next->rows[x] + j * row);
        for (Py_ssize_t b = 0; b < row * (Py_ssize_t)sizeof(float); b += 64) __builtin_prefetch(r + b, 0, 1);
    }
}

static void attend_one(const Pool *p, Py_ssize_t i, const float *q_in, float *out, float *q, float *scores,
                       double *sums, float *maxes) {
    const Py_ssize_t H = p->heads, hd = p->head_dim, row = H * hd, n = p->lens[i];
    const int64_t *t = p->tables + p->starts[i];
    const Py_ssize_t run_len = p->block_size ? p->block_size : CHUNK_TOKENS;
    const float scale = 1.0f / sqrtf((float)hd);
    memset(out, 0, sizeof(float) * row);
    if (n == 0) return;
    for (Py_ssize_t j = 0; j < row; j++) q[j] = q_in[j] * scale;
    for (Py_ssize_t h = 0; h < H; h++) maxes[h] = -INFINITY;
    /* pass 1: scores, `streams` runs at a time, token by token across them */
    const Py_ssize_t num_runs = (n + run_len - 1) / run_len;
    Group g, next;
    for (Py_ssize_t r0 = 0; r0 < num_runs; r0 += p->streams) {
        group(p, t, p->keys, r0, num_runs, run_len, n, scores, &g);
        group(p, t, p->keys, r0 + p->streams, num_runs, run_len, n, scores, &next);
        for (Py_ssize_t j = 0; j < run_len; j++) {
            prefetch_rows(&next, j, row);
            for (Py_ssize_t x = 0; x < g.count; x++) {
                if (j >= g.len[x]) continue;
                const float *kj = g.rows[x] + j * row;
                float *sj = g.scores[x] + j * H;
                for (Py_ssize_t h = 0; h < H; h++) {
                    float v = dot(q + h * hd, kj + h * hd, hd);
                    sj[h] = v;
                    if (v > maxes[h]) maxes[h] = v;
                }
            }
        }
    }
    /* pass 2: weights and their sums */
    for (Py_ssize_t h = 0; h < H; h++) sums[h] = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        float *s = scores + j * H;
        for (Py_ssize_t h = 0; h < H; h++) {
            s[h] = expf(s[h] - maxes[h]);
            sums[h] += s[h];
        }
    }
    /* pass 3: the weighted values, the same way */
    for (Py_ssize_t r0 = 0; r0 < num_runs; r0 += p->streams) {
        group(p, t, p->values, r0, num_runs, run_len, n, scores, &g);
        group(p, t, p->values, r0 + p->streams, num_runs, run_len, n, scores, &next);
        for (Py_ssize_t j = 0; j < run_len; j++) {
            prefetch_rows(&next, j, row);
            for (Py_ssize_t x = 0; x < g.count; x++) {
                if (j >= g.len[x]) continue;
                const float *vj = g.rows[x] + j * row, *sj = g.scores[x] + j * H;
                for (Py_ssize_t h = 0; h < H; h++) axpy(out + h * hd, sj[h], vj + h * hd, hd);
            }
        }
    }
    for (Py_ssize_t h = 0; h < H; h++) {
        const float inv = (float)(1.0 / sums[h]);
        for (Py_ssize_t d = 0; d < hd; d++) out[h * hd + d] *= inv;
    }
}

/* Every slot a sequence reads is inside the planes; its table has the entries it needs. */
static int check_tables(const Pool *p, Py_ssize_t num_seqs, Py_ssize_t num_entries, Py_ssize_t num_slots) {
    if (p->starts[0] != 0 || p->starts[num_seqs] != num_entries) {
        PyErr_Format(PyExc_ValueError, "starts must run from 0 to len(tables) = %zd", num_entries);
        return -1;
    }
    for (Py_ssize_t i = 0; i < num_seqs; i++) {
        const int64_t n = p->lens[i], have = p->starts[i + 1] - p->starts[i];
        const int64_t *t = p->tables + p->starts[i];
        const int64_t need = n == 0 ? 0 : (p->block_size ? (n + p->block_size - 1) / p->block_size : 1);
        if (n < 0 || have < need) {
            PyErr_Format(PyExc_ValueError, "sequence %zd: %lld tokens need %lld table entries, it has %lld", i,
                         (long long)n, (long long)need, (long long)have);
            return -1;
        }
        for (int64_t r = 0; r < need; r++) {
            const int64_t first = p->block_size ? t[r] * p->block_size : t[0];
            const int64_t last = first + (p->block_size ? p->block_size : n) - 1;
            if (t[r] < 0 || last >= num_slots) {
                PyErr_Format(PyExc_IndexError, "sequence %zd: run %lld (slots %lld..%lld) is outside the %zd slots",
                             i, (long long)r, (long long)first, (long long)last, num_slots);
                return -1;
            }
        }
    }
    return 0;
}

PyDoc_STRVAR(paged_attention_doc,
"paged_attention(q, keys, values, tables, starts, seq_lens, block_size, out, streams=0)\n\n"
"Decode attention of num_seqs queries q (num_seqs, heads, head_dim) float32 over one layer's key\n"
"and value planes (slots, heads, head_dim) float32, writing out (num_seqs, heads, head_dim).\n"
"Sequence i's table is tables[starts[i]:starts[i+1]] (int64): its block table if block_size > 0,\n"
"else its first slot (one contiguous run); it attends to its seq_lens[i] tokens. `streams` runs are\n"
"read at once (0: enough for 2 KiB of rows in flight). GIL released.");

static PyObject *paged_attention(PyObject *self, PyObject *args) {
    PyObject *q_obj, *k_obj, *v_obj, *t_obj, *s_obj, *l_obj, *o_obj;
    Py_ssize_t block_size, streams = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOnO|n", &q_obj, &k_obj, &v_obj, &t_obj, &s_obj, &l_obj, &block_size, &o_obj,
                          &streams))
        return NULL;
    Py_buffer q, k, v, t, s, l, o;
    Py_buffer *views[7] = {&q, &k, &v, &t, &s, &l, &o};
    PyObject *objs[7] = {q_obj, k_obj, v_obj, t_obj, s_obj, l_obj, o_obj};
    const char *names[7] = {"q", "keys", "values", "tables", "starts", "seq_lens", "out"};
    const Py_ssize_t sizes[7] = {4, 4, 4, 8, 8, 8, 4};
    int got = 0;
    PyObject *result = NULL;
    float *scratch = NULL;
    for (; got < 7; got++)
        if (get_view(objs[got], views[got], got == 6, sizes[got], names[got]) < 0) goto done;
    if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3 || q.shape[1] != k.shape[1] || q.shape[2] != k.shape[2] ||
        k.shape[0] != v.shape[0] || k.shape[1] != v.shape[1] || k.shape[2] != v.shape[2] || o.len != q.len) {
        PyErr_SetString(PyExc_ValueError,
                        "q and out must be (num_seqs, heads, head_dim), keys and values (slots, heads, head_dim)");
        goto done;
    }
    const Py_ssize_t num_seqs = q.shape[0], H = q.shape[1], hd = q.shape[2];
    if (l.len / 8 != num_seqs || s.len / 8 != num_seqs + 1 || block_size < 0 || streams < 0 || streams > MAX_STREAMS) {
        PyErr_Format(PyExc_ValueError, "need %zd seq_lens, %zd starts, block_size >= 0 and streams in 0..%d", num_seqs,
                     num_seqs + 1, MAX_STREAMS);
        goto done;
    }
    if (streams == 0) streams = auto_streams(q.shape[1] * q.shape[2] * 4);
    Pool p = {k.buf, v.buf, t.buf, s.buf, l.buf, block_size, H, hd, streams};
    if (check_tables(&p, num_seqs, t.len / 8, k.shape[0]) < 0) goto done;
    Py_ssize_t max_len = 0;
    for (Py_ssize_t i = 0; i < num_seqs; i++)
        if (p.lens[i] > max_len) max_len = p.lens[i];
    /* q scaled (H*hd), scores (max_len*H), head maxima (H) and sums (H doubles) */
    scratch = PyMem_Malloc(sizeof(float) * (H * hd + max_len * H + H) + sizeof(double) * H);
    if (!scratch) {
        PyErr_NoMemory();
        goto done;
    }
    double *sums = (double *)scratch;
    float *qs = (float *)(sums + H), *maxes = qs + H * hd, *scores = maxes + H;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < num_seqs; i++)
        attend_one(&p, i, (const float *)q.buf + i * H * hd, (float *)o.buf + i * H * hd, qs, scores, sums, maxes);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(scratch);
    for (int i = 0; i < got; i++) PyBuffer_Release(views[i]);
    return result;
}

static PyMethodDef attention_methods[] = {
    {"paged_attention", paged_attention, METH_VARARGS, paged_attention_doc},
    {NULL, NULL, 0, NULL},
};

int add_attention_functions(PyObject *module) { return PyModule_AddFunctions(module, attention_methods); }
