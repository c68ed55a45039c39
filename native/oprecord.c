/*
 * The Communicator's op record (playground/comm/oprecord.py has the contract): which collective runs
 * (a stack: a labelled region may hold one), the last that ended, and the flight recorder, a ring of
 * the last K operations in memory flight.py maps from a file in the run directory, so the launcher,
 * `inspect --flight` or a live page read it from outside the rank, even after the rank hung or was
 * killed (PyTorch's flight recorder, dumped on a timeout, lives in the process).
 *
 * A *matched* collective (begin_collective given the input `x` or the op) also gets a fingerprint of
 * (name, algorithm, dtype, bytes, op); a 10-bit salt of it is subtracted from every tag its messages
 * carry (`wire_tag`), so the messages of ranks that called different collectives never match: a
 * receive that waits for its own salt while the peer's other salt arrives is a mismatch the
 * communicator names (comm/desync.py), instead of a hang or a wrong result. The salt is the op's code
 * (3 bits: sum, prod, max, min, avg differ always) and 7 bits of a hash of the rest; the tags are
 * otherwise unchanged, so every transport carries it (comm/optags.py has the arithmetic).
 *
 * Cost: no allocation per operation. begin writes a frame and a ring entry (~25 stores, two names
 * copied, one coarse clock read); end two fields. Both replace a tuple and an int the record made
 * before, on the path of an 8-byte all-reduce (docs/results/observability.md has the measurement).
 */
#include "comm_core.h"

#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "getset_cache.h"

#define SALT_SHIFT 21           /* optags.py: SALT_SHIFT */
#define TAG_LIMIT (1L << 20)    /* optags.py: TAG_LIMIT: tags within (-TAG_LIMIT, TAG_LIMIT) may be salted */
#define TAG_MISMATCH (-3L)      /* optags.py: TAG_MISMATCH, never salted */

static getset_cache nbytes_of, dtype_of;
static PyObject *str_nbytes, *str_dtype, *str_str, *str_value;

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint32_t fnv(uint32_t h, const char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Copy at most size - 1 bytes of `s` into `out`, then a NUL (what follows it is left: readers stop there). */
static inline void copy_text(char *out, size_t size, const char *s, Py_ssize_t n) {
    size_t k = n < 0 ? 0 : ((size_t)n < size - 1 ? (size_t)n : size - 1);
    memcpy(out, s, k);
    out[k] = 0;
}

/* ------------------------------------------------------------ small caches of dtypes and ops */

/* dtype objects and reduce ops are few and long-lived: their text is looked up once and kept with a
 * reference, so the pointer cannot be reused by another object while it is cached. */
typedef struct {
    PyObject *key;
    char text[8];
    uint32_t hash;
    int code;
} text_slot;

#define TEXT_SLOTS 8
static text_slot dtypes[TEXT_SLOTS], ops[TEXT_SLOTS];
static int dtypes_next, ops_next;

static int op_code(const char *s) {
    static const char *known[] = {"sum", "prod", "max", "min", "avg"};
    for (int i = 0; i < 5; i++)
        if (strcmp(s, known[i]) == 0) return i + 1;
    return 6 + (int)(fnv(2166136261u, s, (Py_ssize_t)strlen(s)) & 1);
}

/* The slot of `key` (a dtype, through its `str`; an op, through its `value`), NULL on error. */
static text_slot *lookup(text_slot *slots, int *next, PyObject *key, PyObject *attr) {
    for (int i = 0; i < TEXT_SLOTS; i++)
        if (slots[i].key == key) return &slots[i];
    PyObject *text = PyUnicode_Check(key) ? Py_NewRef(key) : PyObject_GetAttr(key, attr);
    if (!text) return NULL;
    if (!PyUnicode_Check(text)) {
        Py_SETREF(text, PyObject_Str(text));
        if (!text) return NULL;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    if (!s) {
        Py_DECREF(text);
        return NULL;
    }
    text_slot *slot = &slots[*next];
    *next = (*next + 1) % TEXT_SLOTS;
    Py_XSETREF(slot->key, Py_NewRef(key));
    copy_text(slot->text, sizeof slot->text, s, n);
    slot->hash = fnv(2166136261u, s, n);
    slot->code = op_code(slot->text);
    Py_DECREF(text);
    return slot;
}

/* ------------------------------------------------------------------------------ the ring */

static flight_entry *slot_of(CommCore *self, uint64_t record) {
    return &self->entries[(record - 1) & self->ring_mask];
}

/* A fresh entry (its record still 0: call publish once it is filled). */
static flight_entry *next_entry(CommCore *self, uint64_t *record) {
    *record = self->ring->records + 1;
    flight_entry *e = slot_of(self, *record);
    e->record = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    return e;
}

static void publish(CommCore *self, flight_entry *e, uint64_t record) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* x86 keeps stores in order; so must the compiler */
    e->record = record;
    self->ring->records = record;
}

static void copy_name(char *out, size_t size, PyObject *name) {
    Py_ssize_t n = 0;
    const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &n) : NULL;
    if (!s) {
        PyErr_Clear();
        s = "", n = 0;
    }
    copy_text(out, size, s, n);
}

uint64_t record_p2p(CommCore *self, int kind, PyObject *peer, PyObject *tag, PyObject *array, int state) {
    if (!self->entries || self->depth) return 0; /* inside a collective its own entry says it */
    uint64_t record;
    flight_entry *e = next_entry(self, &record);
    e->seq = ++self->num_p2p;
    e->group_seq = 0;
    e->t_begin_ns = now_ns();
    e->t_end_ns = state == STATE_COMPLETED ? e->t_begin_ns : 0;
    e->t_wait_ns = 0;
    e->group = 0;
    e->peer = (int32_t)PyLong_AsLong(peer);
    e->tag = (int32_t)PyLong_AsLong(tag);
    e->fingerprint = 0;
    e->kind = (uint8_t)kind;
    e->state = (uint8_t)state;
    e->nbytes = -1;
    e->dtype[0] = 0;
    if (array && PyLong_CheckExact(array)) {
        e->nbytes = PyLong_AsLongLong(array);
    } else if (array && array != Py_None) {
        PyObject *nb = getset_read(&nbytes_of, array, str_nbytes);
        if (nb) {
            e->nbytes = PyLong_AsLongLong(nb);
            Py_DECREF(nb);
        }
        PyObject *dt = getset_read(&dtype_of, array, str_dtype);
        text_slot *t = dt ? lookup(dtypes, &dtypes_next, dt, str_str) : NULL;
        if (t) memcpy(e->dtype, t->text, sizeof e->dtype - 1);
        Py_XDECREF(dt);
    }
    e->op[0] = e->algorithm[0] = 0;
    memcpy(e->name, kind == KIND_SEND ? "send" : "recv", 5);
    if (PyErr_Occurred()) PyErr_Clear(); /* the record never fails the message */
    publish(self, e, record);
    return record;
}

void record_done(CommCore *self, uint64_t record, int state) {
    if (!record || !self->entries) return;
    flight_entry *e = slot_of(self, record);
    if (e->record != record) return; /* overwritten since: the ring wrapped */
    e->t_end_ns = now_ns();
    e->state = (uint8_t)state;
}

/* ------------------------------------------------------------------ begin / end collective */

static void frame_clear(op_frame *f) {
    Py_CLEAR(f->name);
    Py_CLEAR(f->algorithm);
}

void oprecord_clear(CommCore *self) {
    for (int i = 0; i < OP_DEPTH; i++) frame_clear(&self->stack[i]);
    frame_clear(&self->last);
    for (int i = 0; i < 4; i++) Py_CLEAR(self->salted_to[i]);
    Py_CLEAR(self->memo_name);
    Py_CLEAR(self->memo_algorithm);
    Py_CLEAR(self->memo_dtype);
    Py_CLEAR(self->memo_op);
    self->memo_valid = 0;
    if (self->ring) {
        PyBuffer_Release(&self->ring_view);
        self->ring = NULL, self->entries = NULL;
    }
}

static void set_salt(CommCore *self, long tag_shift) { self->tag_shift = tag_shift; }

/* The input's bytes and dtype (a new reference, or NULL for anything but an array). */
static PyObject *input_dtype(PyObject *x, int64_t *nbytes) {
    *nbytes = -1;
    if (x == Py_None) return NULL;
    PyObject *nb = getset_read(&nbytes_of, x, str_nbytes), *dt = NULL;
    if (nb) {
        *nbytes = PyLong_AsLongLong(nb);
        Py_DECREF(nb);
        if (*nbytes != -1 || !PyErr_Occurred()) dt = getset_read(&dtype_of, x, str_dtype);
    }
    if (!dt) {
        PyErr_Clear();
        *nbytes = -1;
    }
    return dt;
}

/* The fingerprint of a matched collective into `f`, from its input's dtype (or NULL) and bytes, and
 * its op (a ReduceOp, a string, or None). -1 on error. */
static int fingerprint(op_frame *f, PyObject *dt, int64_t nbytes, PyObject *op) {
    Py_ssize_t n1, n2;
    const char *s1 = PyUnicode_AsUTF8AndSize(f->name, &n1), *s2 = PyUnicode_AsUTF8AndSize(f->algorithm, &n2);
    if (!s1 || !s2) return -1;
    uint32_t h = fnv(fnv(2166136261u, s1, n1) ^ 0x9e3779b9u, s2, n2);
    int code = 0;
    f->nbytes = -1;
    memset(f->dtype, 0, sizeof f->dtype);
    memset(f->op, 0, sizeof f->op);
    text_slot *t = dt ? lookup(dtypes, &dtypes_next, dt, str_str) : NULL;
    if (t) { /* an array: its bytes and dtype (anything else: only its being there) */
        f->nbytes = nbytes;
        memcpy(f->dtype, t->text, sizeof f->dtype);
        h = (h ^ t->hash) * 16777619u;
        uint64_t b = (uint64_t)nbytes;
        h = fnv(h, (const char *)&b, sizeof b);
    } else {
        PyErr_Clear();
    }
    if (op != Py_None) {
        text_slot *t = lookup(ops, &ops_next, op, str_value);
        if (!t) return -1;
        memcpy(f->op, t->text, sizeof f->op);
        code = t->code;
        h = (h ^ t->hash) * 16777619u;
    }
    f->fingerprint = h ? h : 1;
    long salt = ((long)code << 7) | (long)((h ^ (h >> 7) ^ (h >> 14) ^ (h >> 21)) & 127);
    f->tag_shift = (salt ? salt : 1) << SALT_SHIFT;
    return 0;
}

/* begin_collective(name, algorithm="", x=None, op=None, group=0, group_seq=0) */
static PyObject *begin_collective(CommCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 6 || !PyUnicode_Check(args[0]) || (nargs > 1 && !PyUnicode_Check(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "begin_collective(name: str, algorithm: str = '', x=None, op=None, group=0, group_seq=0)");
        return NULL;
    }
    PyObject *x = nargs > 2 ? args[2] : Py_None, *op = nargs > 3 ? args[3] : Py_None;
    long group = 0, group_seq = 0;
    if (nargs > 4 && ((group = PyLong_AsLong(args[4])) == -1 && PyErr_Occurred())) return NULL;
    if (nargs > 5 && ((group_seq = PyLong_AsLong(args[5])) == -1 && PyErr_Occurred())) return NULL;
    int depth = self->depth;
    uint64_t seq = self->num_ops + 1;
    op_frame scratch = {0}, *f = depth < OP_DEPTH ? &self->stack[depth] : &scratch;
    frame_clear(f);
    f->name = Py_NewRef(args[0]);
    f->algorithm = nargs > 1 ? Py_NewRef(args[1]) : PyUnicode_New(0, 0);
    if (!f->algorithm) return NULL;
    int matched = x != Py_None || op != Py_None;
    f->fingerprint = 0, f->tag_shift = 0, f->group_seq = 0, f->nbytes = -1;
    f->dtype[0] = f->op[0] = 0;
    if (matched) {
        int64_t nbytes;
        PyObject *dt = input_dtype(x, &nbytes);
        if (self->memo_valid && f->name == self->memo_name && f->algorithm == self->memo_algorithm &&
            dt == self->memo_dtype && op == self->memo_op && nbytes == self->memo_nbytes) {
            f->fingerprint = self->memo.fingerprint, f->tag_shift = self->memo.tag_shift;
            f->nbytes = self->memo.nbytes;
            memcpy(f->dtype, self->memo.dtype, sizeof f->dtype);
            memcpy(f->op, self->memo.op, sizeof f->op);
        } else if (fingerprint(f, dt, nbytes, op) < 0) {
            Py_XDECREF(dt);
            frame_clear(f);
            return NULL;
        } else { /* remembered with its inputs held, so no other object can take their addresses */
            Py_XSETREF(self->memo_name, Py_NewRef(f->name));
            Py_XSETREF(self->memo_algorithm, Py_NewRef(f->algorithm));
            Py_XSETREF(self->memo_dtype, Py_XNewRef(dt));
            Py_XSETREF(self->memo_op, Py_NewRef(op));
            self->memo_nbytes = nbytes;
            self->memo.fingerprint = f->fingerprint, self->memo.tag_shift = f->tag_shift, self->memo.nbytes = f->nbytes;
            memcpy(self->memo.dtype, f->dtype, sizeof f->dtype);
            memcpy(self->memo.op, f->op, sizeof f->op);
            self->memo_valid = 1;
        }
        Py_XDECREF(dt);
        f->group_seq = group ? (uint64_t)group_seq : ++self->group0_seq;
    }
    f->seq = seq, f->group = (int32_t)group, f->record = 0;
    self->num_ops = seq;
    self->depth = depth + 1;
    if (matched || depth == 0) set_salt(self, f->tag_shift); /* a label inside a matched one keeps its salt */
    else f->tag_shift = self->tag_shift;
    if (self->entries) {
        uint64_t record;
        flight_entry *e = next_entry(self, &record);
        e->seq = seq, e->group_seq = f->group_seq;
        e->t_begin_ns = now_ns();
        e->t_end_ns = e->t_wait_ns = 0;
        e->nbytes = f->nbytes;
        e->group = f->group, e->peer = -1, e->tag = 0;
        e->fingerprint = f->fingerprint;
        e->kind = KIND_COLLECTIVE, e->state = STATE_STARTED;
        memcpy(e->dtype, f->dtype, sizeof e->dtype);
        e->dtype[sizeof e->dtype - 1] = 0;
        memcpy(e->op, f->op, sizeof e->op);
        copy_name(e->algorithm, sizeof e->algorithm, f->algorithm);
        copy_name(e->name, sizeof e->name, f->name);
        publish(self, e, record);
        self->ring->active = record;
        f->record = record;
    }
    if (f == &scratch) frame_clear(f);
    Py_RETURN_NONE;
}

/* end_collective(ok=True) */
static PyObject *end_collective(CommCore *self, PyObject *const *args, Py_ssize_t nargs) {
    int ok = nargs < 1 || PyObject_IsTrue(args[0]);
    if (ok < 0) return NULL;
    if (self->depth == 0) Py_RETURN_NONE; /* unbalanced: nothing is running */
    int depth = --self->depth;
    if (depth < OP_DEPTH) {
        op_frame *f = &self->stack[depth];
        record_done(self, f->record, ok ? STATE_COMPLETED : STATE_FAILED);
        frame_clear(&self->last);
        self->last = *f; /* the references move */
        f->name = f->algorithm = NULL;
    }
    op_frame *outer = depth && depth <= OP_DEPTH ? &self->stack[depth - 1] : NULL;
    if (!outer || outer->tag_shift != self->tag_shift) set_salt(self, outer ? outer->tag_shift : 0);
    if (self->ring) self->ring->active = outer ? outer->record : 0;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------- salted tags */

PyObject *wire_tag(CommCore *self, PyObject *tag) {
    if (!self->tag_shift || !PyLong_CheckExact(tag)) return Py_NewRef(tag);
    int overflow;
    long t = PyLong_AsLongAndOverflow(tag, &overflow);
    if (overflow || t <= -TAG_LIMIT || t >= TAG_LIMIT || t == TAG_MISMATCH) return Py_NewRef(tag);
    for (int i = 0; i < 4; i++) /* a collective, and the barrier between them: no int made per call */
        if (self->salted_to[i] && t == self->salted_from[i] && self->tag_shift == self->salted_shift[i])
            return Py_NewRef(self->salted_to[i]);
    PyObject *w = PyLong_FromLong(t - self->tag_shift);
    if (!w) return NULL;
    int i = self->salted_next;
    self->salted_next = (i + 1) & 3;
    Py_XSETREF(self->salted_to[i], Py_NewRef(w));
    self->salted_from[i] = t, self->salted_shift[i] = self->tag_shift;
    return w;
}

static PyObject *py_wire_tag(CommCore *self, PyObject *tag) { return wire_tag(self, tag); }

/* ------------------------------------------------------------------ what Python asks of it */

/* _flight_attach(buffer): write the ring into `buffer` (writable, a header flight.py wrote, then
 * capacity entries); None detaches. */
static PyObject *flight_attach(CommCore *self, PyObject *buffer) {
    if (self->ring) {
        PyBuffer_Release(&self->ring_view);
        self->ring = NULL, self->entries = NULL;
    }
    if (buffer == Py_None) Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0) return NULL;
    flight_header *h = (flight_header *)view.buf;
    uint64_t cap = view.len >= FLIGHT_HEADER_BYTES ? h->capacity : 0;
    if (view.len < FLIGHT_HEADER_BYTES || memcmp(h->magic, "PGFLIGHT", 8) != 0 || h->version != FLIGHT_VERSION ||
        h->entry_bytes != sizeof(flight_entry) || cap == 0 || (cap & (cap - 1)) ||
        (uint64_t)view.len < FLIGHT_HEADER_BYTES + cap * sizeof(flight_entry)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "_flight_attach: not a flight ring of this version (flight.py writes one)");
        return NULL;
    }
    self->ring_view = view;
    self->ring = h;
    self->entries = (flight_entry *)((char *)view.buf + FLIGHT_HEADER_BYTES);
    self->ring_mask = cap - 1;
    h->created_ns = now_ns();
    Py_RETURN_NONE;
}

/* _flight_p2p(kind, peer, tag, array_or_None, state) -> record (0: not recorded) */
static PyObject *flight_p2p(CommCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_flight_p2p(kind, peer, tag, array, state)");
        return NULL;
    }
    long kind = PyLong_AsLong(args[0]), state = PyLong_AsLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromUnsignedLongLong(record_p2p(self, (int)kind, args[1], args[2], args[3], (int)state));
}

/* _flight_done(record, state) */
static PyObject *flight_done(CommCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_flight_done(record, state)");
        return NULL;
    }
    unsigned long long record = PyLong_AsUnsignedLongLong(args[0]);
    long state = PyLong_AsLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    record_done(self, record, (int)state);
    Py_RETURN_NONE;
}

/* _flight_wait(peer, tag, since_s): the running collective (or the newest p2p entry) waits for `peer`
 * on `tag`, since time.monotonic() was `since_s`; called by a wait that has gone a whole slice
 * without its message. */
static PyObject *flight_wait(CommCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_flight_wait(peer, tag, since_s)");
        return NULL;
    }
    if (!self->entries) Py_RETURN_NONE;
    uint64_t record = self->depth ? (self->depth <= OP_DEPTH ? self->stack[self->depth - 1].record : 0)
                                  : self->ring->records;
    if (!record) Py_RETURN_NONE;
    flight_entry *e = slot_of(self, record);
    if (e->record != record) Py_RETURN_NONE;
    long peer = PyLong_AsLong(args[0]), tag = PyLong_AsLong(args[1]);
    double since = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred()) return NULL;
    e->peer = (int32_t)peer, e->tag = (int32_t)tag;
    e->t_wait_ns = (int64_t)(since * 1e9);
    Py_RETURN_NONE;
}

static PyObject *frame_tuple(op_frame *f) {
    if (!f->name) Py_RETURN_NONE;
    return Py_BuildValue("(OOK)", f->name, f->algorithm, (unsigned long long)f->seq);
}

/* _op_details() -> dict of the running collective (None when none): what a mismatch error says. */
static PyObject *op_details(CommCore *self, PyObject *unused) {
    if (self->depth == 0 || self->depth > OP_DEPTH) Py_RETURN_NONE;
    op_frame *f = &self->stack[self->depth - 1];
    return Py_BuildValue("{s:O,s:O,s:K,s:K,s:l,s:L,s:s,s:s,s:k,s:O}", "name", f->name, "algorithm", f->algorithm,
                         "seq", (unsigned long long)f->seq, "group_seq", (unsigned long long)f->group_seq, "group",
                         (long)f->group, "nbytes", (long long)f->nbytes, "dtype", f->dtype, "op", f->op,
                         "fingerprint", (unsigned long)f->fingerprint, "matched", f->fingerprint ? Py_True : Py_False);
}

static PyObject *get_current_op(CommCore *self, void *closure) {
    if (self->depth == 0) Py_RETURN_NONE;
    return frame_tuple(&self->stack[(self->depth <= OP_DEPTH ? self->depth : OP_DEPTH) - 1]);
}

static PyObject *get_last_op(CommCore *self, void *closure) { return frame_tuple(&self->last); }

static PyObject *get_num_collectives(CommCore *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->num_ops);
}

static PyObject *get_tag_shift(CommCore *self, void *closure) { return PyLong_FromLong(self->tag_shift); }

static PyObject *get_flight_records(CommCore *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->ring ? self->ring->records : 0);
}

PyMethodDef oprecord_methods[] = {
    {"begin_collective", (PyCFunction)(void (*)(void))begin_collective, METH_FASTCALL,
     "begin_collective(name, algorithm='', x=None, op=None, group=0, group_seq=0) -> None: what follows is "
     "collective number num_collectives (from 1) until end_collective(); given `x` (the input) or `op`, a matched "
     "one, fingerprinted (comm/oprecord.py)."},
    {"end_collective", (PyCFunction)(void (*)(void))end_collective, METH_FASTCALL,
     "end_collective(ok=True) -> None: the collective that ran becomes last_op (failed when not ok)."},
    {"_wire_tag", (PyCFunction)py_wire_tag, METH_O, "_wire_tag(tag) -> the tag as it travels (salted in a matched collective)."},
    {"_flight_attach", (PyCFunction)flight_attach, METH_O, "_flight_attach(buffer or None): keep the flight ring there."},
    {"_flight_p2p", (PyCFunction)(void (*)(void))flight_p2p, METH_FASTCALL,
     "_flight_p2p(kind, peer, tag, array_or_nbytes, state) -> record: a point-to-point op outside any collective."},
    {"_flight_done", (PyCFunction)(void (*)(void))flight_done, METH_FASTCALL, "_flight_done(record, state)."},
    {"_flight_wait", (PyCFunction)(void (*)(void))flight_wait, METH_FASTCALL,
     "_flight_wait(peer, tag, since_s): the running op waits for peer on tag since time.monotonic() was since_s."},
    {"_op_details", (PyCFunction)op_details, METH_NOARGS, "_op_details() -> dict of the running collective, or None."},
    {NULL, NULL, 0, NULL},
};

PyGetSetDef oprecord_getset[] = {
    {"num_collectives", (getter)get_num_collectives, NULL, "collectives begun so far", NULL},
    {"current_op", (getter)get_current_op, NULL, "(collective, algorithm, seq) while one runs, else None", NULL},
    {"last_op", (getter)get_last_op, NULL, "(collective, algorithm, seq) of the one that ended last", NULL},
    {"_tag_shift", (getter)get_tag_shift, NULL, "what the running matched collective subtracts from its tags", NULL},
    {"flight_records", (getter)get_flight_records, NULL, "entries written to the flight ring so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

int oprecord_init(void) {
    return (str_nbytes = PyUnicode_InternFromString("nbytes")) && (str_dtype = PyUnicode_InternFromString("dtype")) &&
                   (str_str = PyUnicode_InternFromString("str")) && (str_value = PyUnicode_InternFromString("value"))
               ? 0
               : -1;
}
