/*
 * SimMessage, SimOutgoing and SimTransport: what the ordinary Communicator sees of the simulator
 * (playground/sim/transport.py): a rank's Transport (send, reserve + send_reserved, send_obj,
 * receive), and a message in virtual time that is both the receiver's Message and the sender's
 * Completion. A post transmits at once when no event is due before the sender's time, else it is an
 * event; folded (fold.py), what comes back is the message the sender's image sends it.
 */
#include "getset_cache.h"
#include "sim.h"

#include <math.h>

static getset_cache nbytes_of, dtype_of, shape_of, size_of;

static PyTypeObject SimMessageType;

static PyObject *str_size, *str_nbytes, *str_dtype, *str_shape, *str_copy, *str_array, *kind_array, *kind_obj;
static PyObject *json_loads;

static void SimMessage_dealloc(SimMessage *self) {
    Py_XDECREF(self->src);
    Py_XDECREF(self->tag);
    Py_XDECREF(self->kind);
    Py_XDECREF(self->dtype);
    Py_XDECREF(self->shape);
    Py_XDECREF(self->payload);
    Py_XDECREF(self->count_obj);
    Py_XDECREF(self->engine);
    Py_TYPE(self)->tp_free((PyObject *)self); /* a Python subclass's type is decref'd by subtype_dealloc */
}

static inline void landed(SimMessage *m) {
    Rank *r = &m->engine->ranks[m->receiver];
    if (r->t < m->arrival) {
        r->t = m->arrival;
        m->waited = 1;
    }
}

enum { TAKE_FIXED, TAKE_COPY, TAKE_REDUCE };

/* The receiver takes the message at its arrival, then works on it: with host costs, its size range's
 * receiving CPU once per message (and a copy out when `how` copies); a reduction of `target_bytes` costs
 * target_bytes / gamma each time. 0, or -1 with an exception. */
static int taken(SimMessage *m, int how, long long target_bytes) {
    landed(m);
    SimEngine *e = m->engine;
    SimNetwork *net = e->net;
    py_charge(net, m->receiver);
    double fixed = 0.0, mem = 0.0, demand = 0.0;
    if (net->host.num && !m->charged) {
        int k = host_range(&net->host, m->nbytes);
        fixed = net->host.recv_s[k] + (m->waited ? net->host.wait_s[k] : 0.0);
        if (how == TAKE_COPY) {
            mem = (double)m->nbytes * net->host.recv_s_per_byte[k];
            demand = net->copy_demand;
        }
        m->charged = 1;
    }
    if (how == TAKE_REDUCE) { /* streamed: of the three streams of c = a + b, the peer's is in cache */
        mem += (double)target_bytes * e->reduce_s_per_byte * (m->streamed ? 2.0 / 3.0 : 1.0);
        demand = net->reduce_demand;
    }
    return sim_work(e, m->receiver, fixed, mem, demand);
}

static PyObject *SimMessage_landed(SimMessage *self, PyObject *unused) {
    landed(self);
    Py_RETURN_NONE;
}

static PyObject *SimMessage_release(SimMessage *self, PyObject *unused) {
    if (taken(self, TAKE_FIXED, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *SimMessage_array(SimMessage *self, PyObject *unused) {
    if (taken(self, TAKE_COPY, 0) < 0) return NULL;
    if (self->engine->phantom == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SimMessage.array: the engine has no phantom()");
        return NULL;
    }
    PyObject *args[2] = {self->count_obj, self->dtype};
    return PyObject_Vectorcall(self->engine->phantom, args, 2, NULL);
}

static PyObject *SimMessage_copy_into(SimMessage *self, PyObject *out) {
    if (taken(self, TAKE_COPY, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Taken at its arrival, then `target.nbytes / gamma` of the receiver's CPU: 0, or -1 with an exception. */
static int reduced(SimMessage *self, PyObject *target) {
    long long nbytes = 0;
    if (self->engine->reduce_s_per_byte) {
        PyObject *nb = getset_read(&nbytes_of, target, str_nbytes);
        if (!nb) return -1;
        nbytes = PyLong_AsLongLong(nb);
        Py_DECREF(nb);
        if (nbytes == -1 && PyErr_Occurred()) return -1;
    }
    return taken(self, TAKE_REDUCE, nbytes);
}

/* reduce_into(target, ufunc, base=None): data-free, the reduction only costs its time. */
static PyObject *SimMessage_reduce_into(SimMessage *self, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames) {
    if (nargs < 2 || nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0) > 3) {
        PyErr_SetString(PyExc_TypeError, "reduce_into(target, ufunc, base=None)");
        return NULL;
    }
    if (reduced(self, args[0]) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *SimMessage_obj(SimMessage *self, PyObject *unused) {
    if (taken(self, TAKE_FIXED, 0) < 0) return NULL;
    if (json_loads == NULL) {
        PyObject *json = PyImport_ImportModule("json");
        if (!json) return NULL;
        json_loads = PyObject_GetAttrString(json, "loads");
        Py_DECREF(json);
        if (!json_loads) return NULL;
    }
    return PyObject_CallOneArg(json_loads, self->payload ? self->payload : Py_None);
}

static PyObject *SimMessage_detach(SimMessage *self, PyObject *unused) { Py_RETURN_NONE; }

/* As the sender's completion: wait until its last byte has left (the sender's clock moves there). */
static PyObject *SimMessage_wait(SimMessage *self, PyObject *const *args, Py_ssize_t nargs) {
    SimEngine *e = self->engine;
    if (!self->transmitted) {
        self->waiter = 1;
        if (sim_block(e, self->sender) < 0) return NULL;
        if (!self->transmitted) {
            PyErr_SetString(PyExc_RuntimeError, "simulation: a send resumed before its transmission");
            return NULL;
        }
    }
    Rank *s = &e->ranks[self->sender];
    if (s->t < self->sent_at) s->t = self->sent_at;
    Py_RETURN_TRUE;
}

static PyObject *SimMessage_get_done(SimMessage *self, void *closure) {
    return PyBool_FromLong(self->transmitted && self->sent_at <= self->engine->ranks[self->sender].t);
}

static PyObject *SimMessage_get_time(SimMessage *self, void *closure) {
    if (!self->transmitted) Py_RETURN_NONE;
    return PyFloat_FromDouble(closure ? self->arrival : self->sent_at);
}

static PyObject *SimMessage_repr(SimMessage *self) {
    return PyUnicode_FromFormat("SimMessage(src=%R, tag=%R, %S, %R, %R, %zd to rank %d)", self->src, self->tag,
                                self->kind, self->dtype, self->shape, self->nbytes, self->receiver);
}

static PyMethodDef SimMessage_methods[] = {
    {"landed", (PyCFunction)SimMessage_landed, METH_NOARGS, "Move the receiver's clock to the arrival."},
    {"release", (PyCFunction)SimMessage_release, METH_NOARGS,
     "Taken: the receiver's clock moves to the arrival (and its receiving CPU, with host costs)."},
    {"detach", (PyCFunction)SimMessage_detach, METH_NOARGS, "Nothing to detach from."},
    {"array", (PyCFunction)SimMessage_array, METH_NOARGS, "A phantom array of the message's length."},
    {"owned_array", (PyCFunction)SimMessage_array, METH_NOARGS, "A phantom array of the message's length."},
    {"copy_into", (PyCFunction)SimMessage_copy_into, METH_O,
     "Data-free: takes the message at its arrival (and, with host costs, the CPU of receiving and copying it)."},
    {"reduce_into", (PyCFunction)(void (*)(void))SimMessage_reduce_into, METH_FASTCALL | METH_KEYWORDS,
     "reduce_into(target, ufunc, base=None): data-free, costs target.nbytes / gamma of the receiver's CPU."},
    {"obj", (PyCFunction)SimMessage_obj, METH_NOARGS, "The JSON value of an object message."},
    {"wait", (PyCFunction)(void (*)(void))SimMessage_wait, METH_FASTCALL,
     "wait(timeout_s) -> True once the last byte has left (the sender's clock moves there)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef SimMessage_getset[] = {
    {"done", (getter)SimMessage_get_done, NULL, "the send is complete at the sender's time", NULL},
    {"sent_at", (getter)SimMessage_get_time, NULL, "when its last byte left (None before)", NULL},
    {"arrival", (getter)SimMessage_get_time, NULL, "when it arrives (None before)", (void *)1},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef SimMessage_members[] = {
    {"src", T_OBJECT_EX, offsetof(SimMessage, src), READONLY, NULL},
    {"tag", T_OBJECT_EX, offsetof(SimMessage, tag), READONLY, NULL},
    {"kind", T_OBJECT_EX, offsetof(SimMessage, kind), READONLY, NULL},
    {"dtype", T_OBJECT_EX, offsetof(SimMessage, dtype), READONLY, NULL},
    {"shape", T_OBJECT_EX, offsetof(SimMessage, shape), READONLY, NULL},
    {"payload", T_OBJECT_EX, offsetof(SimMessage, payload), READONLY, "a copy of the array, or None data-free"},
    {"count", T_OBJECT_EX, offsetof(SimMessage, count_obj), READONLY, "number of elements"},
    {"nbytes", T_LONGLONG, offsetof(SimMessage, nbytes), READONLY, NULL},
    {"sender", T_INT, offsetof(SimMessage, sender), READONLY, NULL},
    {"receiver", T_INT, offsetof(SimMessage, receiver), READONLY, "whose inbox it goes to"},
    {"dst", T_INT, offsetof(SimMessage, dst), READONLY, "where it was sent (the receiver, unless folded)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SimMessageType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.SimMessage",
    .tp_basicsize = sizeof(SimMessage),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A message in virtual time (made by SimTransport): the receiver's Message and the sender's "
              "Completion.",
    .tp_dealloc = (destructor)SimMessage_dealloc,
    .tp_repr = (reprfunc)SimMessage_repr,
    .tp_methods = SimMessage_methods,
    .tp_getset = SimMessage_getset,
    .tp_members = SimMessage_members,
};

/* ---------------------------------------------------------------------------- transport */

typedef struct {
    PyObject_HEAD
    PyObject *array, *dst, *token;
} SimOutgoing;

static void SimOutgoing_dealloc(SimOutgoing *self) {
    Py_XDECREF(self->array);
    Py_XDECREF(self->dst);
    Py_XDECREF(self->token);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef SimOutgoing_members[] = {
    {"array", T_OBJECT_EX, offsetof(SimOutgoing, array), READONLY, "fill it, then send_reserved"},
    {"dst", T_OBJECT_EX, offsetof(SimOutgoing, dst), READONLY, NULL},
    {"token", T_OBJECT_EX, offsetof(SimOutgoing, token), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SimOutgoingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.SimOutgoing",
    .tp_basicsize = sizeof(SimOutgoing),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Space for one outgoing array (comm.transport.Outgoing's fields), from SimTransport.reserve.",
    .tp_dealloc = (destructor)SimOutgoing_dealloc,
    .tp_members = SimOutgoing_members,
};

typedef struct {
    PyObject_HEAD
    SimEngine *engine;
    PyObject *rank_obj;
    PyObject *message_type; /* what send makes: SimMessage, or a subclass that carries data */
    PyObject *empty;        /* with data: np.empty, for reserve */
    PyObject *reserved, *reserved_dtype; /* data-free: the last phantom reserved, reused for the same length */
    Py_ssize_t reserved_count;
    int rank, data;
} SimTransport;

static int SimTransport_init(SimTransport *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"engine", "rank", "message_type", "empty", NULL};
    PyObject *engine, *message_type = (PyObject *)&SimMessageType, *empty = Py_None;
    int rank;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!i|OO", kwlist, &SimEngineType, &engine, &rank, &message_type,
                                     &empty))
        return -1;
    if (!PyType_Check(message_type) || !PyType_IsSubtype((PyTypeObject *)message_type, &SimMessageType)) {
        PyErr_SetString(PyExc_TypeError, "SimTransport: message_type must be SimMessage or a subclass");
        return -1;
    }
    if (sim_check_rank(rank, ((SimEngine *)engine)->num_ranks, "SimTransport") < 0) return -1;
    Py_XSETREF(self->engine, (SimEngine *)Py_NewRef(engine));
    Py_XSETREF(self->rank_obj, PyLong_FromLong(rank));
    Py_XSETREF(self->message_type, Py_NewRef(message_type));
    Py_XSETREF(self->empty, Py_NewRef(empty));
    self->rank = rank;
    self->data = empty != Py_None;
    return self->rank_obj ? 0 : -1;
}

static void SimTransport_dealloc(SimTransport *self) {
    Py_XDECREF(self->engine);
    Py_XDECREF(self->rank_obj);
    Py_XDECREF(self->message_type);
    Py_XDECREF(self->empty);
    Py_XDECREF(self->reserved);
    Py_XDECREF(self->reserved_dtype);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t count_of(PyObject *shape) {
    if (!PyTuple_Check(shape)) {
        PyErr_SetString(PyExc_TypeError, "simulation: a shape must be a tuple");
        return -1;
    }
    Py_ssize_t count = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
        Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        if (d == -1 && PyErr_Occurred()) return -1;
        count *= d;
    }
    return count;
}

enum { COPY_NONE, COPY_IN, COPY_STREAMED };

/* Post a message at the sender's time: transmit it right away when nothing can happen before that
 * time any more (no event due earlier), else as an event. `copy`: COPY_IN charges the sender's copy
 * of the bytes in, COPY_NONE none (computed in place), COPY_STREAMED half of one (its bytes are read
 * from the buffer into a window the caches hold) and the partners' meeting: where they poll, the
 * peer's go-ahead (one more message's fixed costs: a swap of 8 KiB takes a round trip, not a one-way
 * time, measured), and where ranks sleep while they wait (`wake_s`),
 * a wake-up per window's worth: the two ranks then seldom run at once, so they take turns, each
 * filling the window, reducing its peer's and waking the other, until the turns have lasted the
 * migration cost and the scheduler runs the two on cores of their own. Steals `payload`; a new reference. */
static PyObject *post(SimTransport *self, PyObject *dst_obj, PyObject *tag, PyObject *kind, PyObject *dtype,
                      PyObject *shape, long long nbytes, PyObject *payload, int copy) {
    SimEngine *e = self->engine;
    int dst = PyLong_AsLong(dst_obj);
    if ((dst == -1 && PyErr_Occurred()) || sim_check_rank(dst, e->num_ranks, "send") < 0) {
        Py_DECREF(payload);
        return NULL;
    }
    HostCosts *h = &e->net->host;
    py_charge(e->net, self->rank);
    if (h->num) { /* the sender's CPU first (and its copy in, unless the array was computed in place) */
        int k = host_range(h, nbytes);
        double per_byte = h->send_s_per_byte[k];
        if (copy == COPY_STREAMED) /* a copy's read from the buffer; its writes stay in the caches */
            per_byte = fmax(0.0, per_byte - e->net->message_copy_s_per_byte / 2);
        double mem = copy != COPY_NONE ? (double)nbytes * per_byte : 0.0;
        double fixed = h->send_s[k];
        if (copy == COPY_STREAMED && e->net->wake_s == 0) /* polling partners meet: the peer's go-ahead */
            fixed += h->send_s[k] + h->recv_s[k] + h->latency_s[k];
        else if (copy == COPY_STREAMED && e->net->stream_window > 0) { /* sleeping ones: a wake-up a turn */
            double turns = ceil((double)nbytes / e->net->stream_window);
            double turn_s = e->net->stream_window * (per_byte + e->reduce_s_per_byte * 2.0 / 3.0) + e->net->wake_s;
            if (e->net->migrate_s > 0 && turn_s > 0) /* ... until the scheduler has moved them apart */
                turns = fmin(turns, 1 + floor(e->net->migrate_s / turn_s));
            fixed += turns * e->net->wake_s;
        }
        if (sim_work(e, self->rank, fixed, mem, e->net->copy_demand) < 0) {
            Py_DECREF(payload);
            return NULL;
        }
    }
    Py_ssize_t count = kind == kind_obj ? 0 : count_of(shape);
    if (count < 0) {
        Py_DECREF(payload);
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)self->message_type;
    SimMessage *m = (SimMessage *)tp->tp_alloc(tp, 0);
    if (!m) {
        Py_DECREF(payload);
        return NULL;
    }
    m->streamed = copy == COPY_STREAMED;
    int receiver = dst;
    if (e->fold == FOLD_NONE) {
        m->src = Py_NewRef(self->rank_obj);
    } else { /* what comes back: the message this one's image sends to this rank */
        receiver = self->rank;
        m->src = PyLong_FromLong(e->fold == FOLD_ROTATION ? (e->num_ranks - dst) % e->num_ranks : dst);
    }
    m->tag = Py_NewRef(tag);
    m->kind = Py_NewRef(kind);
    m->dtype = Py_NewRef(dtype);
    m->shape = Py_NewRef(shape);
    m->payload = payload;
    m->engine = (SimEngine *)Py_NewRef(e);
    m->count_obj = PyLong_FromSsize_t(count);
    m->nbytes = nbytes;
    m->sender = self->rank;
    m->receiver = receiver;
    m->dst = dst;
    if (!m->count_obj || !m->src) {
        Py_DECREF(m);
        return NULL;
    }
    double t = e->ranks[self->rank].t;
    int err;
    if (!e->starting && (e->heap_len == 0 || t <= e->heap[0].t)) {
        e->now = t; /* nothing can happen before t any more: transmit right away */
        err = sim_transmit(e, m) < 0;
    } else {
        err = sim_post_event(e, t, EV_TRANSMIT, self->rank, m, 0.0) < 0;
    }
    if (err) {
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}

static PyObject *post_array(SimTransport *self, PyObject *dst, PyObject *tag, PyObject *x, PyObject *payload,
                            int copy) {
    PyObject *dtype = getset_read(&dtype_of, x, str_dtype), *shape = NULL, *nb = NULL, *res = NULL;
    if (!dtype || !(shape = getset_read(&shape_of, x, str_shape)) || !(nb = getset_read(&nbytes_of, x, str_nbytes)))
        goto done;
    long long nbytes = PyLong_AsLongLong(nb);
    if (nbytes == -1 && PyErr_Occurred()) goto done;
    res = post(self, dst, tag, kind_array, dtype, shape, nbytes, payload, copy);
    payload = NULL;
done:
    Py_XDECREF(payload);
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(nb);
    return res;
}

static PyObject *SimTransport_send(SimTransport *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send(dst, tag, x)");
        return NULL;
    }
    PyObject *payload = self->data ? PyObject_CallMethodNoArgs(args[2], str_copy) : Py_NewRef(Py_None);
    if (!payload) return NULL;
    return post_array(self, args[0], args[1], args[2], payload, COPY_IN);
}

static PyObject *SimTransport_send_streamed(SimTransport *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_streamed(dst, tag, x)");
        return NULL;
    }
    PyObject *payload = self->data ? PyObject_CallMethodNoArgs(args[2], str_copy) : Py_NewRef(Py_None);
    if (!payload) return NULL;
    return post_array(self, args[0], args[1], args[2], payload, COPY_STREAMED);
}

static PyObject *SimTransport_reserve(SimTransport *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "reserve(dst, count, dtype)");
        return NULL;
    }
    PyObject *array = NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    if (!self->data && self->reserved && self->reserved_count == count && self->reserved_dtype == args[2]) {
        array = Py_NewRef(self->reserved); /* a phantom's elements are all one: the same view serves again */
    } else {
        PyObject *fn = self->data ? self->empty : self->engine->phantom;
        if (fn == NULL || fn == Py_None) {
            PyErr_SetString(PyExc_RuntimeError, "SimTransport.reserve: no array maker");
            return NULL;
        }
        PyObject *call[2] = {args[1], args[2]};
        array = PyObject_Vectorcall(fn, call, 2, NULL);
        if (!array) return NULL;
        if (!self->data) {
            Py_XSETREF(self->reserved, Py_NewRef(array));
            Py_XSETREF(self->reserved_dtype, Py_NewRef(args[2]));
            self->reserved_count = count;
        }
    }
    SimOutgoing *out = PyObject_New(SimOutgoing, &SimOutgoingType);
    if (!out) {
        Py_DECREF(array);
        return NULL;
    }
    out->array = array;
    out->dst = Py_NewRef(args[0]);
    out->token = Py_NewRef(Py_None);
    return (PyObject *)out;
}

static PyObject *SimTransport_send_reserved(SimTransport *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "send_reserved(out, tag)");
        return NULL;
    }
    PyObject *out = args[0];
    PyObject *x, *dst;
    if (Py_IS_TYPE(out, &SimOutgoingType)) {
        x = Py_NewRef(((SimOutgoing *)out)->array);
        dst = Py_NewRef(((SimOutgoing *)out)->dst);
    } else {
        x = PyObject_GetAttr(out, str_array);
        dst = x ? PyObject_GetAttrString(out, "dst") : NULL;
        if (!dst) {
            Py_XDECREF(x);
            return NULL;
        }
    }
    PyObject *res = post_array(self, dst, args[1], x, self->data ? Py_NewRef(x) : Py_NewRef(Py_None), COPY_NONE);
    Py_DECREF(x);
    Py_DECREF(dst);
    return res;
}

static PyObject *u1_dtype, *empty_shape;

static PyObject *SimTransport_send_obj(SimTransport *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "send_obj(dst, tag, body: bytes)");
        return NULL;
    }
    if (u1_dtype == NULL) { /* what an object message's dtype says: bytes */
        PyObject *numpy = PyImport_ImportModule("numpy");
        if (!numpy) return NULL;
        u1_dtype = PyObject_CallMethod(numpy, "dtype", "s", "u1");
        Py_DECREF(numpy);
        if (!u1_dtype) return NULL;
    }
    return post(self, args[0], args[1], kind_obj, u1_dtype, empty_shape, PyBytes_GET_SIZE(args[2]),
                Py_NewRef(args[2]), COPY_NONE);
}

static PyObject *SimTransport_receive(SimTransport *self, PyObject *arg) {
    SimEngine *e = self->engine;
    Rank *me = &e->ranks[self->rank];
    py_charge(e->net, self->rank);
    int waited = !me->head;
    if (waited) {
        long timeout_ms = PyLong_AsLong(arg);
        if (timeout_ms == -1 && PyErr_Occurred()) return NULL;
        if (timeout_ms <= 0) Py_RETURN_NONE;
        me->waiting = 1;
        if (e->net->wake_s > 0) e->net->asleep[self->rank] = 1; /* its transport sleeps while it waits */
        if (sim_block(e, self->rank) < 0) return NULL; /* until a delivery wakes it */
        me->waiting = 0;
        if (!me->head) {
            PyErr_SetString(PyExc_RuntimeError, "simulation: a rank resumed with an empty inbox");
            return NULL;
        }
    }
    SimMessage *m = me->head;
    if (waited) m->waited = 1;
    me->head = m->next;
    if (!me->head) me->tail = NULL;
    m->next = NULL;
    return (PyObject *)m;
}

PyDoc_STRVAR(land_doc,
"land(src, tag, target, ufunc, base, timeout_ms) -> True | a SimMessage | None\n\n"
"The next delivered message, as receive(timeout_ms); when it is an array from (src, tag) of\n"
"target.size elements and the world is data-free, it is taken here as recv_reduce would take it\n"
"(at its arrival, then its reduction's time when ufunc is not None) and True comes back: the\n"
"communicator's one C call per received message (comm_core.c). With data, the message itself.");

static PyObject *SimTransport_land(SimTransport *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "land(src, tag, target, ufunc, base, timeout_ms)");
        return NULL;
    }
    PyObject *got = SimTransport_receive(self, args[5]);
    if (!got || got == Py_None || self->data) return got;
    SimMessage *m = (SimMessage *)got;
    if (m->kind != kind_array) return got;
    PyObject *size = getset_read(&size_of, args[2], str_size);
    if (!size) goto fail;
    int match = PyObject_RichCompareBool(m->src, args[0], Py_EQ);
    if (match == 1) match = PyObject_RichCompareBool(m->tag, args[1], Py_EQ);
    if (match == 1) match = PyObject_RichCompareBool(m->count_obj, size, Py_EQ);
    Py_DECREF(size);
    if (match < 0) goto fail;
    if (!match) return got;
    if (args[3] == Py_None ? taken(m, TAKE_COPY, 0) < 0 : reduced(m, args[2]) < 0) goto fail;
    Py_DECREF(got);
    Py_RETURN_TRUE;
fail:
    Py_DECREF(got);
    return NULL;
}

static PyObject *SimTransport_close(SimTransport *self, PyObject *unused) { Py_RETURN_NONE; }

static PyMethodDef SimTransport_methods[] = {
    {"send", (PyCFunction)(void (*)(void))SimTransport_send, METH_FASTCALL,
     "send(dst, tag, x) -> a SimMessage (its own completion); never blocks."},
    {"reserve", (PyCFunction)(void (*)(void))SimTransport_reserve, METH_FASTCALL,
     "reserve(dst, count, dtype) -> space for an array to fill, then send_reserved."},
    {"send_reserved", (PyCFunction)(void (*)(void))SimTransport_send_reserved, METH_FASTCALL,
     "send_reserved(out, tag) -> a SimMessage."},
    {"send_streamed", (PyCFunction)(void (*)(void))SimTransport_send_streamed, METH_FASTCALL,
     "send_streamed(dst, tag, x) -> a SimMessage: as send, for one half of a swap that streams its bytes "
     "through a window the caches hold (the shm transport's exchange): half a copy in, and the peer's "
     "reduction of it reads one of its three streams from cache."},
    {"send_obj", (PyCFunction)(void (*)(void))SimTransport_send_obj, METH_FASTCALL,
     "send_obj(dst, tag, body) -> a SimMessage."},
    {"receive", (PyCFunction)SimTransport_receive, METH_O,
     "receive(timeout_ms) -> the next delivered message; waits (in virtual time) unless timeout_ms <= 0."},
    {"land", (PyCFunction)(void (*)(void))SimTransport_land, METH_FASTCALL, land_doc},
    {"close", (PyCFunction)SimTransport_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef SimTransport_members[] = {
    {"engine", T_OBJECT, offsetof(SimTransport, engine), READONLY, NULL},
    {"rank", T_INT, offsetof(SimTransport, rank), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SimTransportType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.SimTransport",
    .tp_basicsize = sizeof(SimTransport),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "SimTransport(engine, rank, message_type=SimMessage, empty=None): one simulated rank's Transport; "
              "with `empty` (np.empty) messages carry copies of the arrays (message_type then holds them).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SimTransport_init,
    .tp_dealloc = (destructor)SimTransport_dealloc,
    .tp_methods = SimTransport_methods,
    .tp_members = SimTransport_members,
};

/* --------------------------------------------------------------------------------- module */

static int add_type(PyObject *module, PyTypeObject *type, const char *name) {
    if (PyType_Ready(type) < 0) return -1;
    Py_INCREF(type);
    if (PyModule_AddObject(module, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

int add_sim_types(PyObject *module) {
    if (!(str_size = PyUnicode_InternFromString("size")) || !(str_nbytes = PyUnicode_InternFromString("nbytes")) || !(str_dtype = PyUnicode_InternFromString("dtype")) ||
        !(str_shape = PyUnicode_InternFromString("shape")) || !(str_copy = PyUnicode_InternFromString("copy")) ||
        !(str_array = PyUnicode_InternFromString("array")) || !(kind_array = PyUnicode_InternFromString("array")) ||
        !(kind_obj = PyUnicode_InternFromString("obj")) || !(empty_shape = PyTuple_New(0)))
        return -1;
    if (add_type(module, &SimNetworkType, "SimNetwork") < 0 || add_type(module, &SimEngineType, "SimEngine") < 0 ||
        add_type(module, &SimMessageType, "SimMessage") < 0 || add_type(module, &SimOutgoingType, "SimOutgoing") < 0 ||
        add_type(module, &SimTransportType, "SimTransport") < 0)
        return -1;
    return 0;
}
