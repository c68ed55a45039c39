/*
 * CommCore: the base of playground.comm.communicator.Communicator, holding the fields every message
 * touches (rank, size, byte counts, tracer, transport, parked messages) and the untraced fast path
 * of the calls a collective makes per message: isend, recv_reduce, sendrecv_reduce (recursive doubling's
 * step: the transport's exchange, one C call over shm), and isend_computed's two halves (_try_reserve,
 * _post_reserved; the fill between them runs in Python's own frame).
 *
 * Why C: a message of a ring cost each rank ~8 Python calls in the communicator alone (isend_computed,
 * _with_room twice, _post, recv_reduce, _take, a SendRequest, its test), most of a simulated
 * message's time: 35.8 thousand instructions a message with them, 20.1 thousand with this file,
 * 18.6 once its attribute reads went through getset_cache.h (docs/simulator.md). Here the common case is one C call per message: the peer is in range,
 * nothing from (src, tag) is parked, the transport has room at once, and the tracer does not
 * record messages.
 *
 * The Python methods stay the one definition: whatever is not that common case (tracing, a full
 * ring, a parked message, a receive that must wait in slices and check for aborts, a bad peer) is
 * handed, untouched, to `_isend`, `_recv_reduce`, `_sendrecv_reduce`, `_with_room` or `_post`, which do all of it
 * (a transport's post that returned NoRoom has done nothing, so trying again there is safe). A
 * test runs the collectives with the fast path and without it (`fast = False`) and compares.
 */
#include "comm_core.h"

#include <structmember.h>
#include <string.h>

#include "getset_cache.h"

/* The struct (CommCore) and the op record it keeps are in comm_core.h and oprecord.c. */

/* What the Python side hands over once (configure_comm): the DONE and COMPLETE singletons, the
 * request type, NoRoom, numpy's dtype type, the receive slice. */
static PyObject *done_req, *complete, *no_room_type, *send_request_type, *dtype_type, *slice_ms;
static PyObject *zero, *str_messages, *str_send, *str_reserve, *str_send_reserved, *str_array, *str_nbytes, *str_size,
    *str_isend, *str_isend_lent, *str_recv_reduce, *str_post, *str_append, *str_sendrecv_reduce;

static int CommCore_clear(CommCore *self);

static void CommCore_dealloc(CommCore *self) {
    PyObject_GC_UnTrack(self);
    CommCore_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int CommCore_traverse(CommCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->rank);
    Py_VISIT(self->size);
    Py_VISIT(self->bytes_sent);
    Py_VISIT(self->bytes_received);
    Py_VISIT(self->tracer);
    Py_VISIT(self->transport);
    Py_VISIT(self->land);
    Py_VISIT(self->exchange);
    Py_VISIT(self->lend);
    Py_VISIT(self->pending);
    for (int i = 0; i < OP_DEPTH; i++) {
        Py_VISIT(self->stack[i].name);
        Py_VISIT(self->stack[i].algorithm);
    }
    Py_VISIT(self->last.name);
    Py_VISIT(self->last.algorithm);
    Py_VISIT(self->memo_name);
    Py_VISIT(self->memo_algorithm);
    Py_VISIT(self->memo_dtype);
    Py_VISIT(self->memo_op);
    return 0;
}

static int CommCore_clear(CommCore *self) {
    Py_CLEAR(self->rank);
    Py_CLEAR(self->size);
    Py_CLEAR(self->bytes_sent);
    Py_CLEAR(self->bytes_received);
    Py_CLEAR(self->tracer);
    Py_CLEAR(self->transport);
    Py_CLEAR(self->land);
    Py_CLEAR(self->exchange);
    Py_CLEAR(self->lend);
    Py_CLEAR(self->pending);
    oprecord_clear(self);
    return 0;
}

/* 1 when the common case applies: configured, on, the tracer not recording messages; -1 on error. */
static getset_cache messages_of, nbytes_of, size_of, array_of, done_of;

static int untraced(CommCore *self) {
    if (!self->fast || !send_request_type || !self->transport || !self->tracer) return 0;
    PyObject *m = getset_read(&messages_of, self->tracer, str_messages);
    if (!m) return -1;
    int on = PyObject_IsTrue(m);
    Py_DECREF(m);
    return on < 0 ? -1 : !on;
}

/* The peer as a C int when it is one of the ranks, else -1 (the Python path raises InvalidPeer). */
static int peer_in_range(CommCore *self, PyObject *peer) {
    if (!PyLong_CheckExact(peer) || !self->size || !PyLong_CheckExact(self->size)) return -1;
    int overflow;
    long p = PyLong_AsLongAndOverflow(peer, &overflow), size = PyLong_AsLong(self->size);
    if (size == -1 && PyErr_Occurred()) PyErr_Clear();
    return (overflow || p < 0 || p >= size) ? -1 : (int)p;
}

/* *counter += array.nbytes */
static int add_nbytes(PyObject **counter, PyObject *array) {
    PyObject *nb = getset_read(&nbytes_of, array, str_nbytes);
    if (!nb) return -1;
    PyObject *sum = *counter ? PyNumber_Add(*counter, nb) : NULL;
    Py_DECREF(nb);
    if (!sum) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_AttributeError, "Communicator: byte counter not set");
        return -1;
    }
    Py_SETREF(*counter, sum);
    return 0;
}

typedef struct {
    PyObject_HEAD
    PyObject *comm, *completion, *peer, *tag;
    uint64_t record; /* its entry in the flight ring, marked completed once the send is (0: none) */
} SendRequestCore;

static PyTypeObject SendRequestCoreType;

/* DONE for a complete send, else a SendRequest for its completion, made without a call to its
 * constructor (its fields are SendRequestCore's). Steals `got`. */
static PyObject *request_for(CommCore *self, PyObject *got, PyObject *dst, PyObject *tag, PyObject *array) {
    /* a send outside any collective is its own entry in the flight ring */
    uint64_t record = self->depth ? 0 : record_p2p(self, KIND_SEND, dst, tag, array, got == complete ? STATE_COMPLETED : STATE_SCHEDULED);
    if (got == complete) {
        Py_DECREF(got);
        return Py_NewRef(done_req);
    }
    PyTypeObject *tp = (PyTypeObject *)send_request_type;
    SendRequestCore *req = (SendRequestCore *)tp->tp_alloc(tp, 0);
    if (!req) {
        Py_DECREF(got);
        return NULL;
    }
    req->comm = Py_NewRef(self);
    req->completion = got;
    req->peer = Py_NewRef(dst);
    req->tag = Py_NewRef(tag);
    req->record = record;
    return (PyObject *)req;
}

/* The Python method `name` with the call's own arguments: the path for everything but the common case. */
static PyObject *slow(CommCore *self, PyObject *name, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *method = PyObject_GetAttr((PyObject *)self, name);
    if (!method) return NULL;
    PyObject *res = PyObject_Vectorcall(method, args, (size_t)nargs, kwnames);
    Py_DECREF(method);
    return res;
}

/* isend(x, dst, tag=0), and isend_lent's (`lend`: the transport's `lend`, else NULL) */
static PyObject *post_array(CommCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                            PyObject *slow_name, PyObject *lend) {
    if (kwnames || nargs < 2 || nargs > 3) return slow(self, slow_name, args, nargs, kwnames);
    PyObject *x = args[0], *dst = args[1], *tag = nargs > 2 ? args[2] : zero;
    int fast = untraced(self);
    if (fast < 0) return NULL;
    if (!fast || peer_in_range(self, dst) < 0) return slow(self, slow_name, args, nargs, NULL);
    PyObject *wtag = wire_tag(self, tag);
    if (!wtag) return NULL;
    PyObject *call[4] = {self->transport, dst, wtag, x};
    PyObject *got = lend ? PyObject_Vectorcall(lend, call + 1, 3, NULL)
                         : PyObject_VectorcallMethod(str_send, call, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(wtag);
    if (!got) return NULL;
    if (PyObject_TypeCheck(got, (PyTypeObject *)no_room_type)) { /* nothing was posted: wait for room there */
        Py_DECREF(got);
        return slow(self, slow_name, args, nargs, NULL);
    }
    if (add_nbytes(&self->bytes_sent, x) < 0) {
        Py_DECREF(got);
        return NULL;
    }
    return request_for(self, got, dst, tag, x);
}

static PyObject *CommCore_isend(CommCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return post_array(self, args, nargs, kwnames, str_isend, NULL);
}

/* isend_lent(x, dst, tag=0): isend through the transport's `lend` where it has one */
static PyObject *CommCore_isend_lent(CommCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *lend = self->lend && self->lend != Py_None ? self->lend : NULL;
    return post_array(self, args, nargs, kwnames, lend ? str_isend_lent : str_isend, lend);
}

/* _try_reserve(dst, count, dtype) -> the transport's Outgoing, or None: isend_computed's first half when
 * the common case applies and the transport has room at once (None: the Python path reserves). The
 * fill runs in isend_computed's own frame, not called from here: a callback from C would put one more
 * interpreter frame on the C stack, which every simulated rank's greenlet saves and restores at
 * each switch (the fill receives, so the switch happens inside it). */
static PyObject *CommCore_try_reserve(CommCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_try_reserve(dst, count, dtype)");
        return NULL;
    }
    int fast = untraced(self);
    if (fast < 0) return NULL;
    if (!fast || peer_in_range(self, args[0]) < 0 || !PyObject_TypeCheck(args[2], (PyTypeObject *)dtype_type))
        Py_RETURN_NONE;
    PyObject *call[4] = {self->transport, args[0], args[1], args[2]};
    PyObject *out = PyObject_VectorcallMethod(str_reserve, call, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (out && PyObject_TypeCheck(out, (PyTypeObject *)no_room_type)) { /* nothing reserved */
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* _post_reserved(out, dst, tag) -> PendingOp: isend_computed's second half, `_post` of a filled Outgoing
 * (which that calls itself when tracing, or when the transport has no room at once). */
static PyObject *CommCore_post_reserved(CommCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_post_reserved(out, dst, tag)");
        return NULL;
    }
    PyObject *out = args[0], *dst = args[1], *tag = args[2], *got = NULL, *res = NULL;
    PyObject *array = getset_read(&array_of, out, str_array);
    if (!array) return NULL;
    PyObject *wtag = wire_tag(self, tag);
    if (!wtag) {
        Py_DECREF(array);
        return NULL;
    }
    int fast = untraced(self);
    if (fast < 0) goto done;
    if (fast) {
        PyObject *post[3] = {self->transport, out, wtag};
        got = PyObject_VectorcallMethod(str_send_reserved, post, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (!got) goto done;
        if (!PyObject_TypeCheck(got, (PyTypeObject *)no_room_type)) {
            if (add_nbytes(&self->bytes_sent, array) == 0) res = request_for(self, got, dst, tag, array);
            else Py_DECREF(got);
            got = NULL;
            goto done;
        }
    }
    PyObject *nb = PyObject_GetAttr(array, str_nbytes), *sr = NULL; /* the whole path: room, count, trace */
    if (nb && (sr = PyObject_GetAttr(self->transport, str_send_reserved))) {
        PyObject *again[8] = {(PyObject *)self, dst, tag, nb, Py_True, sr, out, wtag};
        res = PyObject_VectorcallMethod(str_post, again, 8, NULL);
    }
    Py_XDECREF(nb);
    Py_XDECREF(sr);
done:
    Py_XDECREF(got);
    Py_DECREF(array);
    Py_DECREF(wtag);
    return res;
}

/* Is a message from (src, tag) parked? 1 yes, 0 no, -1 error. */
static int parked(CommCore *self, PyObject *src, PyObject *tag) {
    if (!PyDict_Check(self->pending) || PyDict_GET_SIZE(self->pending) == 0) return 0;
    PyObject *key = PyTuple_Pack(2, src, tag);
    if (!key) return -1;
    PyObject *q = PyDict_GetItemWithError(self->pending, key); /* borrowed; no default made */
    Py_DECREF(key);
    if (!q) return PyErr_Occurred() ? -1 : 0;
    Py_ssize_t n = PyObject_Length(q);
    return n < 0 ? -1 : n > 0;
}

/* Park `msg` (a Message the transport returned first) with the others from its (src, tag). 0 or -1. */
static int park(CommCore *self, PyObject *msg) {
    PyObject *msg_src = PyObject_GetAttrString(msg, "src"), *msg_tag = NULL, *key = NULL, *q = NULL, *r = NULL;
    if (msg_src && (msg_tag = PyObject_GetAttrString(msg, "tag")) && (key = PyTuple_Pack(2, msg_src, msg_tag)) &&
        (q = PyObject_GetItem(self->pending, key)))
        r = PyObject_CallMethodOneArg(q, str_append, msg);
    Py_XDECREF(msg_src);
    Py_XDECREF(msg_tag);
    Py_XDECREF(key);
    Py_XDECREF(q);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* recv_reduce(src, tag, target, ufunc=None, base=None) */
static PyObject *CommCore_recv_reduce(CommCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs < 3 || nargs > 5) return slow(self, str_recv_reduce, args, nargs, kwnames);
    PyObject *src = args[0], *tag = args[1], *target = args[2];
    PyObject *ufunc = nargs > 3 ? args[3] : Py_None, *base = nargs > 4 ? args[4] : Py_None;
    for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (nargs < 4 && PyUnicode_CompareWithASCIIString(name, "ufunc") == 0)
            ufunc = args[nargs + i];
        else if (nargs < 5 && PyUnicode_CompareWithASCIIString(name, "base") == 0)
            base = args[nargs + i];
        else /* one the Python path rejects */
            return slow(self, str_recv_reduce, args, nargs, kwnames);
    }
    int fast = untraced(self);
    if (fast < 0) return NULL;
    if (!fast || !self->land || self->land == Py_None || !self->pending || peer_in_range(self, src) < 0)
        return slow(self, str_recv_reduce, args, nargs, kwnames);
    PyObject *wtag = wire_tag(self, tag);
    if (!wtag) return NULL;
    int p = parked(self, src, wtag);
    if (p) {
        Py_DECREF(wtag);
        return p < 0 ? NULL : slow(self, str_recv_reduce, args, nargs, kwnames);
    }
    PyObject *call[6] = {src, wtag, target, ufunc, base, slice_ms};
    PyObject *got = PyObject_Vectorcall(self->land, call, 6, NULL);
    Py_DECREF(wtag);
    if (!got) return NULL;
    if (got == Py_True) {
        Py_DECREF(got);
        if (add_nbytes(&self->bytes_received, target) < 0) return NULL;
        if (!self->depth) record_p2p(self, KIND_RECV, src, tag, target, STATE_COMPLETED);
        return getset_read(&size_of, target, str_size);
    }
    if (got != Py_None) { /* a message: parked (it is the next from its pair), the Python path takes it from there */
        int r = park(self, got);
        Py_DECREF(got);
        if (r < 0) return NULL;
    } else {
        Py_DECREF(got);
    }
    return slow(self, str_recv_reduce, args, nargs, kwnames); /* nothing yet: waits in slices, checking for aborts */
}

/* sendrecv_reduce(buf, dst, src, tag=0, ufunc=None): the transport's `exchange` (post, then land in
 * `buf`; over shm one C call, or a stream) when the common case applies; its outcomes as
 * Communicator._sendrecv_reduce handles them. Everything else goes to that Python method. */
static PyObject *CommCore_sendrecv_reduce(CommCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (kwnames || nargs < 3 || nargs > 5) return slow(self, str_sendrecv_reduce, args, nargs, kwnames);
    PyObject *buf = args[0], *dst = args[1], *src = args[2], *tag = nargs > 3 ? args[3] : zero;
    PyObject *ufunc = nargs > 4 ? args[4] : Py_None;
    int fast = untraced(self);
    if (fast < 0) return NULL;
    if (!fast || !self->exchange || self->exchange == Py_None || !self->pending || peer_in_range(self, dst) < 0 ||
        peer_in_range(self, src) < 0)
        return slow(self, str_sendrecv_reduce, args, nargs, NULL);
    PyObject *wtag = wire_tag(self, tag);
    if (!wtag) return NULL;
    int p = parked(self, src, wtag); /* a message from src parked earlier is the one to take first */
    if (p) {
        Py_DECREF(wtag);
        return p < 0 ? NULL : slow(self, str_sendrecv_reduce, args, nargs, NULL);
    }
    PyObject *call[6] = {dst, src, wtag, buf, ufunc, slice_ms};
    PyObject *got = PyObject_Vectorcall(self->exchange, call, 6, NULL);
    Py_DECREF(wtag);
    if (!got) return NULL;
    if (got == Py_None) { /* nothing posted: the Python path posts it the usual way */
        Py_DECREF(got);
        return slow(self, str_sendrecv_reduce, args, nargs, NULL);
    }
    if (add_nbytes(&self->bytes_sent, buf) < 0) {
        Py_DECREF(got);
        return NULL;
    }
    if (!self->depth) record_p2p(self, KIND_SEND, dst, tag, buf, STATE_COMPLETED);
    if (got == Py_True) {
        Py_DECREF(got);
        if (add_nbytes(&self->bytes_received, buf) < 0) return NULL;
        if (!self->depth) record_p2p(self, KIND_RECV, src, tag, buf, STATE_COMPLETED);
        return getset_read(&size_of, buf, str_size);
    }
    if (got != Py_False) {
        int r = park(self, got);
        Py_DECREF(got);
        if (r < 0) return NULL;
    } else {
        Py_DECREF(got);
    }
    PyObject *rest[4] = {src, tag, buf, ufunc};
    return CommCore_recv_reduce(self, rest, 4, NULL);
}

static PyMethodDef CommCore_methods[] = {
    {"isend", (PyCFunction)(void (*)(void))CommCore_isend, METH_FASTCALL | METH_KEYWORDS,
     "isend(x, dst, tag=0) -> PendingOp: start sending `x`; do not modify it until the request completes "
     "(it may go zero-copy)."},
    {"isend_lent", (PyCFunction)(void (*)(void))CommCore_isend_lent, METH_FASTCALL | METH_KEYWORDS,
     "isend_lent(x, dst, tag=0) -> PendingOp: isend of an array left unchanged until the request completes, "
     "which the receiver may read where it lies (the transport's `lend`; see Communicator._isend_lent)."},
    {"_try_reserve", (PyCFunction)(void (*)(void))CommCore_try_reserve, METH_FASTCALL,
     "_try_reserve(dst, count, dtype) -> Outgoing | None: the transport's space at once, untraced."},
    {"_post_reserved", (PyCFunction)(void (*)(void))CommCore_post_reserved, METH_FASTCALL,
     "_post_reserved(out, dst, tag) -> PendingOp: post a filled Outgoing (the C path of _post)."},
    {"recv_reduce", (PyCFunction)(void (*)(void))CommCore_recv_reduce, METH_FASTCALL | METH_KEYWORDS,
     "recv_reduce(src, tag, target, ufunc=None, base=None) -> count: receive into `target`, reducing "
     "(see Communicator._recv_reduce)."},
    {"sendrecv_reduce", (PyCFunction)(void (*)(void))CommCore_sendrecv_reduce, METH_FASTCALL | METH_KEYWORDS,
     "sendrecv_reduce(buf, dst, src, tag=0, ufunc=None) -> count: send `buf`, then receive into it, "
     "reducing (see Communicator._sendrecv_reduce)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef CommCore_members[] = {
    {"rank", T_OBJECT_EX, offsetof(CommCore, rank), 0, NULL},
    {"size", T_OBJECT_EX, offsetof(CommCore, size), 0, NULL},
    {"bytes_sent", T_OBJECT_EX, offsetof(CommCore, bytes_sent), 0, "of arrays"},
    {"bytes_received", T_OBJECT_EX, offsetof(CommCore, bytes_received), 0, "of arrays"},
    {"tracer", T_OBJECT_EX, offsetof(CommCore, tracer), 0, NULL},
    {"_transport", T_OBJECT_EX, offsetof(CommCore, transport), 0, NULL},
    {"_land", T_OBJECT_EX, offsetof(CommCore, land), 0, NULL},
    {"_exchange", T_OBJECT_EX, offsetof(CommCore, exchange), 0, NULL},
    {"_lend", T_OBJECT_EX, offsetof(CommCore, lend), 0, NULL},
    {"_pending", T_OBJECT_EX, offsetof(CommCore, pending), 0, NULL},
    {"fast", T_BOOL, offsetof(CommCore, fast), 0, "take the C path for the common case (default True)"},
    {"_depth", T_INT, offsetof(CommCore, depth), READONLY, "collectives running now, nested (0: none)"},
    {NULL, 0, 0, 0, NULL},
};

/* Made by object's own tp_new, which also lays out a Python subclass's attributes inline (Python
 * 3.11's managed dict): then the Communicator's own attributes (the op record's, set on every
 * collective) are stored and loaded at specialised speed, as on a plain class, not through a dict. */
static PyObject *CommCore_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static PyObject *no_args;
    if (!no_args && !(no_args = PyTuple_New(0))) return NULL;
    CommCore *self = (CommCore *)PyBaseObject_Type.tp_new(type, no_args, NULL);
    if (self) self->fast = 1;
    return (PyObject *)self;
}

static PyTypeObject CommCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.CommCore",
    .tp_basicsize = sizeof(CommCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The Communicator's fields and the C path of isend, recv_reduce and isend_computed (comm_core.c).",
    .tp_new = CommCore_new,
    .tp_dealloc = (destructor)CommCore_dealloc,
    .tp_traverse = (traverseproc)CommCore_traverse,
    .tp_clear = (inquiry)CommCore_clear,
    .tp_methods = CommCore_methods,
    .tp_members = CommCore_members,
};

/* ---------------------------------------------------------------------------- send requests */

/* SendRequestCore: requests.SendRequest's fields, its constructor, test() and wait()'s first look: a
 * ring keeps a request per segment and asks each whether it is done, so these are one C call each;
 * a wait that must sleep goes to the Python `_wait` (slices, aborts, the deadline). */
static PyObject *str_done, *str_wait_slow;

static int SendRequestCore_init(SendRequestCore *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"comm", "completion", "peer", "tag", NULL};
    PyObject *comm, *completion, *peer, *tag;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO", kwlist, &comm, &completion, &peer, &tag)) return -1;
    Py_XSETREF(self->comm, Py_NewRef(comm));
    Py_XSETREF(self->completion, Py_NewRef(completion));
    Py_XSETREF(self->peer, Py_NewRef(peer));
    Py_XSETREF(self->tag, Py_NewRef(tag));
    return 0;
}

static int SendRequestCore_traverse(SendRequestCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->comm);
    Py_VISIT(self->completion);
    Py_VISIT(self->peer);
    Py_VISIT(self->tag);
    return 0;
}

static int SendRequestCore_clear(SendRequestCore *self) {
    Py_CLEAR(self->comm);
    Py_CLEAR(self->completion);
    Py_CLEAR(self->peer);
    Py_CLEAR(self->tag);
    return 0;
}

static void SendRequestCore_dealloc(SendRequestCore *self) {
    PyObject_GC_UnTrack(self);
    SendRequestCore_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *SendRequestCore_test(SendRequestCore *self, PyObject *unused) {
    if (!self->completion) {
        PyErr_SetString(PyExc_RuntimeError, "SendRequest: no completion");
        return NULL;
    }
    PyObject *done = getset_read(&done_of, self->completion, str_done);
    if (done == Py_True && self->record && PyObject_TypeCheck(self->comm, &CommCoreType)) { /* its flight entry, once */
        record_done((CommCore *)self->comm, self->record, STATE_COMPLETED);
        self->record = 0;
    }
    return done;
}

/* wait(timeout_s=None) -> None */
static PyObject *SendRequestCore_wait(SendRequestCore *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames) {
    PyObject *done = SendRequestCore_test(self, NULL);
    if (!done) return NULL;
    int is_done = PyObject_IsTrue(done);
    Py_DECREF(done);
    if (is_done < 0) return NULL;
    if (is_done) Py_RETURN_NONE;
    PyObject *method = PyObject_GetAttr((PyObject *)self, str_wait_slow);
    if (!method) return NULL;
    PyObject *res = PyObject_Vectorcall(method, args, (size_t)nargs, kwnames);
    Py_DECREF(method);
    return res;
}

static PyMethodDef SendRequestCore_methods[] = {
    {"test", (PyCFunction)SendRequestCore_test, METH_NOARGS, "Has the send completed?"},
    {"wait", (PyCFunction)(void (*)(void))SendRequestCore_wait, METH_FASTCALL | METH_KEYWORDS,
     "wait(timeout_s=None) -> None once the send has completed (SendRequest._wait when it must sleep)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef SendRequestCore_members[] = {
    {"record", T_ULONGLONG, offsetof(SendRequestCore, record), 0, "its entry in the flight ring (0: none)"},
    {"comm", T_OBJECT_EX, offsetof(SendRequestCore, comm), 0, NULL},
    {"completion", T_OBJECT_EX, offsetof(SendRequestCore, completion), 0, NULL},
    {"peer", T_OBJECT_EX, offsetof(SendRequestCore, peer), 0, NULL},
    {"tag", T_OBJECT_EX, offsetof(SendRequestCore, tag), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SendRequestCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.SendRequestCore",
    .tp_basicsize = sizeof(SendRequestCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SendRequestCore(comm, completion, peer, tag): requests.SendRequest's C part (comm_core.c).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SendRequestCore_init,
    .tp_dealloc = (destructor)SendRequestCore_dealloc,
    .tp_traverse = (traverseproc)SendRequestCore_traverse,
    .tp_clear = (inquiry)SendRequestCore_clear,
    .tp_methods = SendRequestCore_methods,
    .tp_members = SendRequestCore_members,
};

static PyObject *configure_comm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "configure_comm(DONE, COMPLETE, NoRoom, SendRequest, np.dtype, slice_ms)");
        return NULL;
    }
    PyObject **slots[6] = {&done_req, &complete, &no_room_type, &send_request_type, &dtype_type, &slice_ms};
    for (int i = 0; i < 6; i++) Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    for (int i = 2; i < 5; i++)
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "configure_comm: NoRoom, SendRequest and np.dtype are types");
            return NULL;
        }
    if (!PyType_IsSubtype((PyTypeObject *)args[3], &SendRequestCoreType)) {
        PyErr_SetString(PyExc_TypeError, "configure_comm: SendRequest must subclass SendRequestCore");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef comm_functions[] = {
    {"configure_comm", (PyCFunction)(void (*)(void))configure_comm, METH_FASTCALL,
     "configure_comm(DONE, COMPLETE, NoRoom, SendRequest, np.dtype, slice_ms): what CommCore returns and "
     "recognises (communicator.py calls it once)."},
    {NULL, NULL, 0, NULL},
};

/* CommCore's methods are its own (above) and the op record's (oprecord.c): one table, made once. */
static int join_methods(void) {
    size_t a = 0, b = 0;
    while (CommCore_methods[a].ml_name) a++;
    while (oprecord_methods[b].ml_name) b++;
    PyMethodDef *all = PyMem_Calloc(a + b + 1, sizeof(PyMethodDef));
    if (!all) return -1;
    memcpy(all, CommCore_methods, a * sizeof(PyMethodDef));
    memcpy(all + a, oprecord_methods, b * sizeof(PyMethodDef));
    CommCoreType.tp_methods = all;
    CommCoreType.tp_getset = oprecord_getset;
    return 0;
}

int add_comm_core(PyObject *module) {
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {{&str_messages, "messages"},   {&str_send, "send"},
                 {&str_reserve, "reserve"},     {&str_send_reserved, "send_reserved"},
                 {&str_array, "array"},         {&str_nbytes, "nbytes"},
                 {&str_size, "size"},           {&str_isend, "_isend"}, {&str_isend_lent, "_isend_lent"},
                 {&str_recv_reduce, "_recv_reduce"}, {&str_sendrecv_reduce, "_sendrecv_reduce"},
                 {&str_post, "_post"},          {&str_append, "append"},
                 {&str_done, "done"},           {&str_wait_slow, "_wait"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].text))) return -1;
    if (!(zero = PyLong_FromLong(0)) || oprecord_init() < 0 ||
        join_methods() < 0 || PyType_Ready(&CommCoreType) < 0 || PyType_Ready(&SendRequestCoreType) < 0)
        return -1;
    PyTypeObject *types[2] = {&CommCoreType, &SendRequestCoreType};
    for (int i = 0; i < 2; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(module, types[i]->tp_name + strlen("_playground_native."), (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            return -1;
        }
    }
    return PyModule_AddFunctions(module, comm_functions);
}
