/*
 * Mailboxes.stream: a large array passed between two ranks cell by cell through a small window of
 * shared memory, and reduced (or copied) out of it as it arrives (comm/shm_stream.py).
 *
 * Why: a ring message is copied into the sender's ring whole before the receiver is told, so a
 * 16 MiB exchange writes 16 MiB of ring, then reads it back, and every byte has left the cores'
 * caches in between. A stream reuses a window of a few cells (WINDOW_CELLS x 64 KiB, in the
 * sender's ring to the receiver): the sender writes a cell, the receiver reduces it into its array
 * while it is still in a cache, and the slot is written again a few cells later. That is how
 * MPICH's shared-memory collectives pipeline through their cells; here both ranks of an exchange
 * send and reduce at once, each one cell ahead of the other, so neither waits for the other's
 * whole copy.
 *
 * A window, in the producer's ring (the descriptor of its ring space is in the STREAM record that
 * announces it, so per-sender order with other messages holds):
 *   +0    u64 produced   cells written (only the producer stores it)
 *   +64   u64 consumed   cells taken (only the consumer stores it)
 *   +128  i32 pid        the producer's process (a consumer waiting outside a slice checks it)
 *   +132  u32 slots      cells the window holds; cell i of the array goes to slot i % slots
 *   +136  u64 cell_bytes
 *   +144  u64 nbytes     the whole array
 *   +192  the slots
 * The producer writes cell i once consumed > i - slots; the consumer reads it once produced > i.
 * Each store of a counter is sequentially consistent and followed by a ring of the other rank's
 * bell, so a rank that waits can sleep on its own bell (the futex pattern of mailbox.c) and is
 * woken by whichever counter the other rank moves.
 *
 * stream() does what it can of one rank's part: produce its array into its window (out) and/or
 * consume the peer's (in), reducing each cell into `target` (reduce.c; code op * 8 + dtype, op 0
 * copies, no target: drained), until both are done (True) or `timeout_ms` passed (False): the
 * caller checks for aborts between slices and calls again, the counters in the windows say where
 * it was. When the array sent and the array reduced into are one (an in-place exchange), a cell is
 * reduced only after it was produced: its bytes have been sent before they are overwritten.
 */
#include "mailbox.h" /* first: Python.h sets the feature macros (sched_getcpu) */

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WINDOW_HEADER 192

typedef struct {
    char *win;         /* the window (NULL: this side is not streaming) */
    char *data;        /* the array sent (out) or reduced into (in; NULL: drained) */
    const char *base;  /* in: target = op(base, cell); NULL: op(target, cell) */
    uint32_t slots;
    uint64_t cell, nbytes, ncells;
} Side;

static inline uint64_t *produced_of(char *win) { return (uint64_t *)win; }
static inline uint64_t *consumed_of(char *win) { return (uint64_t *)(win + 64); }
static inline char *slot_of(const Side *s, uint64_t i) { return s->win + WINDOW_HEADER + (i % s->slots) * s->cell; }
static inline uint64_t len_of(const Side *s, uint64_t i) {
    uint64_t left = s->nbytes - i * s->cell;
    return left < s->cell ? left : s->cell;
}

/* Geometry from a window's header, checked against the buffer that holds it. -1 with ValueError. */
static int read_window(Side *s, const Py_buffer *w) {
    if (w->len < WINDOW_HEADER) {
        PyErr_Format(PyExc_ValueError, "stream: a window of %zd bytes (its header alone is %d)", w->len, WINDOW_HEADER);
        return -1;
    }
    s->win = w->buf;
    memcpy(&s->slots, s->win + 132, 4);
    memcpy(&s->cell, s->win + 136, 8);
    memcpy(&s->nbytes, s->win + 144, 8);
    if (s->slots == 0 || s->cell == 0 || (uint64_t)w->len < WINDOW_HEADER + (uint64_t)s->slots * s->cell) {
        PyErr_Format(PyExc_ValueError, "stream: a window of %zd bytes cannot hold %u cells of %llu", w->len,
                     s->slots, (unsigned long long)s->cell);
        return -1;
    }
    s->ncells = (s->nbytes + s->cell - 1) / s->cell;
    return 0;
}

/* Without the GIL: until `out` is all produced and `in` all consumed (1), the deadline (0), or, with
 * `watch`, a message waiting in this rank's mailboxes (2). */
static int run(Mailboxes *self, Bell *peer, Side *out, Side *in, int code, int same, double timeout_ms,
               double pause_ns, double yield_ns, int watch) {
    Bell *own = bell_of(self->own);
    double start = mono_ns(), deadline = start + timeout_ms * 1e6;
    double pause_end = start + pause_ns, spin_end = start + (pause_ns > yield_ns ? pause_ns : yield_ns);
    uint64_t p = out->win ? *produced_of(out->win) : 0, c = in->win ? *consumed_of(in->win) : 0;
    for (;;) {
        int moved = 0;
        /* one cell out: while the window has room, and (exchanging) no more than a window ahead of
         * what this rank has taken in, so the cells it reads back are still in a cache */
        if (out->win && p < out->ncells && p - LOAD_SC(consumed_of(out->win)) < out->slots &&
            !(in->win && c < in->ncells && p >= c + out->slots)) {
            memcpy(slot_of(out, p), out->data + p * out->cell, len_of(out, p));
            STORE_SC(produced_of(out->win), ++p);
            mbox_ring(peer);
            moved = 1;
        }
        /* one cell in, if it has come (and, in place, once this rank has sent those bytes) */
        if (in->win && c < in->ncells && LOAD_SC(produced_of(in->win)) > c) {
            uint64_t off = c * in->cell, len = len_of(in, c);
            if (!same || p * out->cell >= off + len || p >= out->ncells) {
                if (in->data) {
                    const char *a = in->base ? in->base + off : in->data + off;
                    reduce_small(code, in->data + off, a, slot_of(in, c), len);
                }
                STORE_SC(consumed_of(in->win), ++c);
                mbox_ring(peer);
                moved = 1;
            }
        }
        if ((!out->win || p >= out->ncells) && (!in->win || c >= in->ncells)) return 1;
        if (moved) continue;
        if (watch && LOAD_ACQ(&own->bell) != self->quiet_bell && mbox_scan(self) >= 0) return 2;
        /* nothing to do until the peer moves a counter: pause, then yield, then sleep on the bell */
        double now = mono_ns();
        if (now >= deadline) return 0;
        if (now < pause_end) {
            cpu_relax();
        } else if (now < spin_end) {
            sched_yield();
        } else {
            STORE_SC(&own->sleeping, 1);
            uint32_t seen = LOAD_SC(&own->bell);
            int room = out->win && p < out->ncells && p - LOAD_SC(consumed_of(out->win)) < out->slots;
            int data = in->win && c < in->ncells && LOAD_SC(produced_of(in->win)) > c;
            if (!room && !data) {
                double left = deadline - now;
                struct timespec ts = {(time_t)(left / 1e9), (long)((long long)left % 1000000000LL)};
                self->slept++;
                syscall(SYS_futex, &own->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
            }
            STORE_SC(&own->sleeping, 0);
        }
    }
}

const char Mailboxes_stream_doc[] =
    "stream(peer, out_window, src, in_window, target, code, base, timeout_ms, pause_ns, yield_ns, watch=False)\n"
    "    -> bool | None\n\n"
    "Produce `src` (bytes) into `out_window` and/or consume `in_window` into `target` (target =\n"
    "op(base or target, cell), code as land's; target None: drain), cell by cell, with the GIL\n"
    "released, ringing rank `peer`'s bell after each counter it moves. True once both are done;\n"
    "False at `timeout_ms` (call again: the windows' counters say where it was). Either window may\n"
    "be None. `src` and `target` may be one array (an in-place exchange): then each cell is sent\n"
    "before it is reduced into. With `watch`, None as soon as a message waits in this rank's mailboxes\n"
    "(a rank sending while it waits for its peer's). A window's header gives its geometry (native/stream.c).";

static int get(PyObject *obj, Py_buffer *view, int flags, int *held) {
    *held = 0;
    if (obj == Py_None) return 0;
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    *held = 1;
    return 0;
}

PyObject *Mailboxes_stream(Mailboxes *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 10 || nargs > 11) {
        PyErr_SetString(PyExc_TypeError, "stream(peer, out_window, src, in_window, target, code, base, timeout_ms, "
                                         "pause_ns, yield_ns, watch=False)");
        return NULL;
    }
    int watch = nargs > 10 ? PyObject_IsTrue(args[10]) : 0;
    if (watch < 0) return NULL;
    if (!self->own) {
        PyErr_SetString(PyExc_ValueError, "the mailboxes are closed");
        return NULL;
    }
    long peer = PyLong_AsLong(args[0]);
    long code = PyLong_AsLong(args[5]);
    double timeout_ms = PyFloat_AsDouble(args[7]);
    double pause_ns = PyFloat_AsDouble(args[8]);
    double yield_ns = PyFloat_AsDouble(args[9]);
    if (PyErr_Occurred()) return NULL;
    if (peer < 0 || peer >= self->size || peer == self->rank) {
        PyErr_Format(PyExc_ValueError, "rank %d cannot stream with rank %ld", self->rank, peer);
        return NULL;
    }
    char *file = mbox_peer_file(self, (int)peer);
    if (!file) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "rank %ld has no mailbox file", peer);
        return NULL;
    }
    Py_buffer ow, src, iw, target, base;
    int has_ow, has_src, has_iw, has_target, has_base;
    PyObject *result = NULL;
    Side out = {0}, in = {0};
    if (get(args[1], &ow, PyBUF_WRITABLE, &has_ow) < 0) return NULL;
    if (get(args[2], &src, PyBUF_C_CONTIGUOUS, &has_src) < 0) goto release_ow;
    if (get(args[3], &iw, PyBUF_WRITABLE, &has_iw) < 0) goto release_src;
    if (get(args[4], &target, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS, &has_target) < 0) goto release_iw;
    if (get(args[6], &base, PyBUF_C_CONTIGUOUS, &has_base) < 0) goto release_target;
    if (has_ow) {
        if (!has_src || read_window(&out, &ow) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "stream: an out window needs its src");
            goto release_base;
        }
        if ((uint64_t)src.len != out.nbytes) {
            PyErr_Format(PyExc_ValueError, "stream: a window for %llu bytes, a src of %zd",
                         (unsigned long long)out.nbytes, src.len);
            goto release_base;
        }
        out.data = src.buf;
    }
    if (has_iw) {
        if (read_window(&in, &iw) < 0) goto release_base;
        if (has_target && (uint64_t)target.len != in.nbytes) {
            PyErr_Format(PyExc_ValueError, "stream: %llu bytes coming, a target of %zd", (unsigned long long)in.nbytes,
                         target.len);
            goto release_base;
        }
        if (has_base && base.len != target.len) {
            PyErr_Format(PyExc_ValueError, "stream: a base of %zd bytes for a target of %zd", base.len, target.len);
            goto release_base;
        }
        in.data = has_target ? target.buf : NULL;
        in.base = has_base ? base.buf : NULL;
        if (in.data && (code >> 3) != 0 && reduce_small((int)code, in.data, in.data, in.data, 0) < 0) {
            PyErr_Format(PyExc_ValueError, "stream: no reduction with code %ld", code);
            goto release_base;
        }
    }
    /* one array sent and reduced into: only whole, from the same byte */
    int same = 0;
    if (out.data && in.data) {
        char *a = out.data, *b = in.data;
        if (a < b + in.nbytes && b < a + out.nbytes) {
            if (a != b) {
                PyErr_SetString(PyExc_ValueError, "stream: src and target overlap without being one array");
                goto release_base;
            }
            same = 1;
        }
    }
    int cpu = sched_getcpu();
    if (pause_ns > 0 && cpu >= 0 && mbox_shares_cpu(self, cpu)) { /* as mailbox.c: never spin on a shared core */
        if (yield_ns < pause_ns) yield_ns = pause_ns;
        pause_ns = 0;
    }
    int done;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    done = run(self, bell_of(file), &out, &in, (int)code, same, timeout_ms, pause_ns, yield_ns, watch);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    result = Py_NewRef(done == 2 ? Py_None : done ? Py_True : Py_False);
release_base:
    if (has_base) PyBuffer_Release(&base);
release_target:
    if (has_target) PyBuffer_Release(&target);
release_iw:
    if (has_iw) PyBuffer_Release(&iw);
release_src:
    if (has_src) PyBuffer_Release(&src);
release_ow:
    if (has_ow) PyBuffer_Release(&ow);
    return result;
}
