/*
 * The simulator's event core (playground/sim/): the network's ports, the event queue, the ranks'
 * clocks and inboxes, and the messages and transports the ordinary Communicator sees.
 *
 * Why C: every simulated message used to cost ~20 Python calls in the simulator alone (post,
 * transmit, reserve the ports, push and pop a heap of tuples, deliver, wake, complete), about half
 * of its ~67 thousand instructions, and a heap of tuples of Python floats misses the cache on every
 * comparison once it holds a thousand ranks' events. Here an event is a plain 40-byte record in one
 * array, a rank is a 40-byte record (clock, inbox, its greenlet), and the Python left per
 * message is the algorithm's and the communicator's own: the collectives still run unchanged, on
 * every simulated rank.
 *
 * The model and the order of events are exactly those playground/sim/engine.py and network.py
 * state (the Python docstrings are the reference; this file follows them line by line):
 *   SimNetwork    ports: a message of n bytes holds the sender's out-port and the receiver's
 *                 in-port (one pair per link kind) for n / beta from when both are free, and
 *                 arrives alpha after its last byte left; with shared cores, a message's two
 *                 copies and every reduction wait for CPUs (a heap of when each core frees up).
 *   SimEngine     events run by (time, posting order): a transmission, a rank's resumption, a
 *                 rank's turn on a shared CPU. A rank that must wait runs the loop itself
 *                 (`block`) and switches straight to the rank the next event wakes.
 *   SimMessage    a message in virtual time: the receiver's Message (taken at its arrival) and
 *                 the sender's Completion (done once its last byte left). Data-free: its payload
 *                 is None and reductions only cost time; transport.py subclasses it to carry data.
 *   SimTransport  one rank's Transport: send, reserve + send_reserved, send_obj, receive.
 * Folded (opt-in, playground/sim/fold.py): when every rank's timeline is the same by a symmetry of the
 * algorithm and the network, rank 0 alone runs; its messages use its own out- and in-port and come
 * back to it as the messages its images send it.
 *
 * Ownership: the heap holds a reference to each message it will transmit, an inbox to each
 * message delivered and not yet taken; messages hold their engine. Engine.run calls close() at
 * the end, which drops what is left (after a deadlock or an error) and the greenlets.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>

#define PROGRESS_EVENTS (1 << 16) /* progress(engine) every this many events of a long run */

enum { EV_TRANSMIT, EV_RESUME, EV_CPU };

/* Folded (fold.py): rank 0 alone runs, and each message it sends to d comes back to it as the one
 * its image sends it: from -d (mod N) under rotations, from d under XOR translations. */
enum { FOLD_NONE, FOLD_ROTATION, FOLD_XOR };

typedef struct SimMessage SimMessage;

typedef struct {
    double t;       /* when it runs, virtual seconds */
    uint64_t seq;   /* posting order: ties run first-posted first */
    SimMessage *msg; /* EV_TRANSMIT: the message (a reference) */
    double seconds; /* EV_CPU: the work */
    int32_t kind;
    int32_t rank;   /* EV_RESUME, EV_CPU: whose */
} Event;

typedef struct {
    double t;               /* this rank's clock; never behind the engine's `now` */
    SimMessage *head, *tail; /* delivered, not yet taken: in delivery (= sending-time) order */
    PyObject *greenlet;     /* the greenlet running it */
    int waiting;            /* blocked until a delivery wakes it */
} Rank;

/* ------------------------------------------------------------------------------ network */

typedef struct {
    PyObject_HEAD
    int num_ranks, ranks_per_node, num_cores;
    double alpha_s[2], beta[2]; /* [0] inside a node, [1] between nodes */
    double *out[2], *in[2];     /* per link kind: when each rank's out-/in-port is free */
    double *cores;              /* min-heap: when each shared core is free (NULL: a CPU per rank) */
    long long bytes_within_nodes, bytes_between_nodes;
} SimNetwork;

static void dheap_sift_down(double *h, int n, int i) {
    double v = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (!(h[c] < v)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

static void dheap_push(double *h, int n, double v) { /* h has room for n + 1 */
    int i = n;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!(v < h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static double dheap_pop(double *h, int n) { /* n >= 1 */
    double top = h[0];
    if (n > 1) {
        h[0] = h[n - 1];
        dheap_sift_down(h, n - 1, 0);
    }
    return top;
}

static inline double max2(double a, double b) { return b > a ? b : a; }

/* network.py's Network.transmit: (time the last byte left, arrival) of a message from src to dst posted
 * at `now`, through the in-port of `in_rank` (dst; src itself when folded: fold.py). */
static void net_transmit(SimNetwork *net, int src, int dst, int in_rank, long long nbytes, double now,
                         double *done_s, double *arrival_s) {
    int kind = src / net->ranks_per_node != dst / net->ranks_per_node;
    double *out = net->out[kind], *in = net->in[kind];
    double alpha = net->alpha_s[kind];
    double start = max2(max2(now, out[src]), in[in_rank]);
    double busy = (double)nbytes / net->beta[kind];
    if (net->cores != NULL) { /* the sender's copy in and the receiver's copy out hold CPUs */
        double *cores = net->cores;
        if (net->num_cores == 1) {
            start = max2(start, cores[0]);
            cores[0] = start + 2 * (alpha + busy);
            busy = alpha + 2 * busy;
        } else { /* the two cores that free up first; the later one sets the start */
            int n = net->num_cores;
            dheap_pop(cores, n);
            start = max2(start, dheap_pop(cores, n - 1));
            double end = start + alpha + busy;
            dheap_push(cores, n - 2, end);
            dheap_push(cores, n - 1, end);
        }
    }
    double done = start + busy;
    out[src] = in[in_rank] = done;
    if (kind)
        net->bytes_between_nodes += nbytes;
    else
        net->bytes_within_nodes += nbytes;
    *done_s = done;
    *arrival_s = done + alpha;
}

/* network.py's Network.cpu: when work of `seconds` started at `now` ends (waiting for a free core). */
static double net_cpu(SimNetwork *net, double now, double seconds) {
    if (net->cores == NULL) return now + seconds;
    double start = max2(now, net->cores[0]);
    double end = start + seconds;
    dheap_pop(net->cores, net->num_cores);
    dheap_push(net->cores, net->num_cores - 1, end);
    return end;
}

static int SimNetwork_init(SimNetwork *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"num_ranks", "ranks_per_node", "intra_alpha_s", "intra_beta_bytes_per_s",
                             "inter_alpha_s", "inter_beta_bytes_per_s", "cores", NULL};
    int n, per_node, cores = 0;
    double a0, b0, a1, b1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iidddd|i", kwlist, &n, &per_node, &a0, &b0, &a1, &b1, &cores))
        return -1;
    if (n < 1 || per_node < 1 || cores < 0) {
        PyErr_SetString(PyExc_ValueError, "SimNetwork: num_ranks and ranks_per_node >= 1, cores >= 0");
        return -1;
    }
    if (self->out[0] != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SimNetwork: already initialised");
        return -1;
    }
    self->num_ranks = n;
    self->ranks_per_node = per_node;
    self->alpha_s[0] = a0, self->beta[0] = b0, self->alpha_s[1] = a1, self->beta[1] = b1;
    for (int k = 0; k < 2; k++) {
        self->out[k] = PyMem_Calloc(n, sizeof(double));
        self->in[k] = PyMem_Calloc(n, sizeof(double));
        if (!self->out[k] || !self->in[k]) {
            PyErr_NoMemory();
            return -1;
        }
    }
    self->num_cores = cores;
    if (cores) {
        self->cores = PyMem_Calloc(cores, sizeof(double));
        if (!self->cores) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static void SimNetwork_dealloc(SimNetwork *self) {
    for (int k = 0; k < 2; k++) {
        PyMem_Free(self->out[k]);
        PyMem_Free(self->in[k]);
    }
    PyMem_Free(self->cores);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_rank(int rank, int n, const char *what) {
    if (rank < 0 || rank >= n) {
        PyErr_Format(PyExc_ValueError, "%s: rank %d is not in 0..%d", what, rank, n - 1);
        return -1;
    }
    return 0;
}

static PyObject *SimNetwork_transmit(SimNetwork *self, PyObject *args) {
    int src, dst;
    long long nbytes;
    double now, done, arrival;
    if (!PyArg_ParseTuple(args, "iiLd", &src, &dst, &nbytes, &now)) return NULL;
    if (check_rank(src, self->num_ranks, "transmit") < 0 || check_rank(dst, self->num_ranks, "transmit") < 0)
        return NULL;
    net_transmit(self, src, dst, dst, nbytes, now, &done, &arrival);
    return Py_BuildValue("(dd)", done, arrival);
}

static PyObject *SimNetwork_cpu(SimNetwork *self, PyObject *args) {
    double now, seconds;
    if (!PyArg_ParseTuple(args, "dd", &now, &seconds)) return NULL;
    return PyFloat_FromDouble(net_cpu(self, now, seconds));
}

static PyMethodDef SimNetwork_methods[] = {
    {"transmit", (PyCFunction)SimNetwork_transmit, METH_VARARGS,
     "transmit(src, dst, nbytes, now) -> (time its last byte left, arrival): reserve the ports."},
    {"cpu", (PyCFunction)SimNetwork_cpu, METH_VARARGS,
     "cpu(now, seconds) -> when work of `seconds` started at `now` ends (on a free core, if shared)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef SimNetwork_members[] = {
    {"bytes_within_nodes", T_LONGLONG, offsetof(SimNetwork, bytes_within_nodes), READONLY, NULL},
    {"bytes_between_nodes", T_LONGLONG, offsetof(SimNetwork, bytes_between_nodes), READONLY, NULL},
    {"num_ranks", T_INT, offsetof(SimNetwork, num_ranks), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SimNetworkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.SimNetwork",
    .tp_basicsize = sizeof(SimNetwork),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "SimNetwork(num_ranks, ranks_per_node, intra_alpha_s, intra_beta_bytes_per_s, inter_alpha_s, "
              "inter_beta_bytes_per_s, cores=0): the ports and shared cores of network.py's model.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SimNetwork_init,
    .tp_dealloc = (destructor)SimNetwork_dealloc,
    .tp_methods = SimNetwork_methods,
    .tp_members = SimNetwork_members,
};

/* ------------------------------------------------------------------------------- engine */

typedef struct {
    PyObject_HEAD
    SimNetwork *net;
    Rank *ranks;
    int num_ranks;
    int starting; /* ranks still to start at time 0: nothing runs before they have */
    int failed;   /* a rank raised: the main loop stops */
    int fold;     /* FOLD_*: one rank stands for all (fold.py) */
    Event *heap;
    Py_ssize_t heap_len, heap_cap;
    uint64_t seq;
    double now; /* the time of the last event run */
    double reduce_s_per_byte;
    long long num_events, num_messages, num_switches;
    PyObject *main_greenlet, *progress, *phantom;
} SimEngine;

static PyTypeObject SimEngineType;
static PyTypeObject SimMessageType;

struct SimMessage {
    PyObject_HEAD
    /* first cache line: what the sender's `done` (asked at each step of a long ring, when the
     * message is cold) and the receiver's `landed` read */
    SimEngine *engine;
    double sent_at, arrival; /* valid once transmitted */
    int sender, receiver, dst; /* dst: where it was sent; receiver: whose inbox (the sender itself when folded) */
    char transmitted, waiter; /* waiter: the sender blocks until this message is transmitted */
    /* the Message fields (payload None: data-free), as objects: T_OBJECT_EX members, which Python 3.11
     * specialises into a load at an offset (LOAD_ATTR_SLOT) */
    PyObject *src, *tag, *kind, *dtype, *shape, *payload, *count_obj;
    SimMessage *next; /* in the receiver's inbox */
    long long nbytes;
};

static inline int ev_before(const Event *a, const Event *b) {
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int post_event(SimEngine *e, double t, int kind, int rank, SimMessage *msg, double seconds) {
    if (e->heap_len == e->heap_cap) {
        Py_ssize_t cap = e->heap_cap ? 2 * e->heap_cap : 64;
        Event *h = PyMem_Realloc(e->heap, cap * sizeof(Event));
        if (!h) {
            PyErr_NoMemory();
            return -1;
        }
        e->heap = h, e->heap_cap = cap;
    }
    Event ev = {t, ++e->seq, msg, seconds, kind, rank};
    Py_XINCREF(msg);
    Event *h = e->heap;
    Py_ssize_t i = e->heap_len++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (!ev_before(&ev, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = ev;
    return 0;
}

static Event pop_event(SimEngine *e) {
    Event *h = e->heap, top = h[0];
    Py_ssize_t n = --e->heap_len;
    if (n > 0) {
        Event last = h[n];
        Py_ssize_t i = 0;
        for (;;) {
            Py_ssize_t c = 2 * i + 1;
            if (c >= n) break;
            if (c + 1 < n && ev_before(&h[c + 1], &h[c])) c++;
            if (!ev_before(&h[c], &last)) break;
            h[i] = h[c];
            i = c;
        }
        h[i] = last;
    }
    return top;
}

/* The event of a message's transmission: reserve its ports, deliver it to the receiver stamped with
 * its arrival, complete the send. A rank waiting for it (the receiver for a message, the sender for
 * its completion) is woken by an event at this time, so it runs after the events already due now, in
 * posting order like every other. 0, or -1 on error. */
static int transmit(SimEngine *e, SimMessage *msg) {
    e->num_messages++;
    int r = msg->receiver;
    net_transmit(e->net, msg->sender, msg->dst, r, msg->nbytes, e->now, &msg->sent_at, &msg->arrival);
    msg->transmitted = 1;
    Rank *rk = &e->ranks[r];
    Py_INCREF(msg);
    if (rk->tail)
        rk->tail->next = msg;
    else
        rk->head = msg;
    rk->tail = msg;
    if (rk->waiting) {
        rk->waiting = 0; /* woken once, even if more messages arrive before it runs */
        if (post_event(e, e->now, EV_RESUME, r, NULL, 0.0) < 0) return -1;
    }
    if (msg->waiter) { /* the sender waits for this send to complete */
        msg->waiter = 0;
        if (post_event(e, e->now, EV_RESUME, msg->sender, NULL, 0.0) < 0) return -1;
    }
    return 0;
}

/* Run one popped event: the rank it hands control to (-1: none), or -2 on error. */
static int run_event(SimEngine *e, Event *ev) {
    e->now = ev->t;
    e->num_events++;
    int nxt;
    switch (ev->kind) {
    case EV_TRANSMIT:
        nxt = transmit(e, ev->msg) < 0 ? -2 : -1;
        Py_DECREF(ev->msg);
        break;
    case EV_CPU:
        e->ranks[ev->rank].t = net_cpu(e->net, e->now, ev->seconds);
        nxt = ev->rank;
        break;
    default:
        nxt = ev->rank;
    }
    if (nxt > -2 && e->progress != NULL && e->progress != Py_None && !(e->num_events % PROGRESS_EVENTS)) {
        PyObject *res = PyObject_CallOneArg(e->progress, (PyObject *)e);
        if (!res) return -2;
        Py_DECREF(res);
    }
    return nxt;
}

/* greenlet's C API (its capsule, the slot of PyGreenlet_Switch in greenlet.h, "does not change"):
 * g.switch() without building and parsing an argument tuple for a Python-level call. */
#define GREENLET_API_SWITCH 6
typedef PyObject *(*greenlet_switch_t)(PyObject *greenlet, PyObject *args, PyObject *kwargs);
static greenlet_switch_t greenlet_switch;

static int call_switch(PyObject *glet) {
    if (glet == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "simulation: a rank without a greenlet");
        return -1;
    }
    Py_INCREF(glet);
    PyObject *res = greenlet_switch(glet, NULL, NULL);
    Py_DECREF(glet);
    if (!res) return -1;
    Py_DECREF(res);
    return 0;
}

/* Stop `me` (the running rank) until an event hands it control back: run events in order and switch
 * straight to the first rank one of them wakes (or return if that is `me`). 0, or -1 on error. */
static int block(SimEngine *e, int me) {
    if (e->starting) return call_switch(e->main_greenlet);
    while (e->heap_len) {
        Event ev = pop_event(e);
        int nxt = run_event(e, &ev);
        if (nxt == -2) return -1;
        if (nxt < 0) continue;
        if (nxt == me) return 0;
        e->num_switches++;
        return call_switch(e->ranks[nxt].greenlet); /* back here when an event wakes `me` */
    }
    return call_switch(e->main_greenlet); /* nothing left to run: the main loop reports the deadlock */
}

/* `rank` (running) works for `seconds` of CPU, on a free core if they are shared. */
static int compute(SimEngine *e, int rank, double seconds) {
    if (e->net->cores == NULL) {
        e->ranks[rank].t += seconds;
        return 0;
    }
    if (post_event(e, e->ranks[rank].t, EV_CPU, rank, NULL, seconds) < 0) return -1;
    return block(e, rank);
}

static void drop_messages(SimEngine *e) {
    while (e->heap_len) {
        Event ev = e->heap[--e->heap_len];
        Py_XDECREF(ev.msg);
    }
    for (int r = 0; r < e->num_ranks; r++) {
        SimMessage *m = e->ranks[r].head;
        e->ranks[r].head = e->ranks[r].tail = NULL;
        while (m) {
            SimMessage *next = m->next;
            m->next = NULL;
            Py_DECREF(m);
            m = next;
        }
    }
}

static int SimEngine_init(SimEngine *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"network", "reduce_s_per_byte", "fold", NULL};
    PyObject *net;
    double reduce_s_per_byte = 0.0;
    int fold = FOLD_NONE;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|di", kwlist, &SimNetworkType, &net, &reduce_s_per_byte,
                                     &fold))
        return -1;
    if (fold < FOLD_NONE || fold > FOLD_XOR) {
        PyErr_Format(PyExc_ValueError, "SimEngine: fold must be 0 (none), 1 (rotation) or 2 (xor), got %d", fold);
        return -1;
    }
    if (self->ranks != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SimEngine: already initialised");
        return -1;
    }
    if (greenlet_switch == NULL) {
        void **api = PyCapsule_Import("greenlet._C_API", 0);
        if (!api) return -1;
        greenlet_switch = (greenlet_switch_t)api[GREENLET_API_SWITCH];
    }
    int n = ((SimNetwork *)net)->num_ranks;
    self->ranks = PyMem_Calloc(n, sizeof(Rank));
    if (!self->ranks) {
        PyErr_NoMemory();
        return -1;
    }
    self->num_ranks = n;
    Py_INCREF(net);
    self->net = (SimNetwork *)net;
    self->reduce_s_per_byte = reduce_s_per_byte;
    self->fold = fold;
    self->starting = 1;
    return 0;
}

static int SimEngine_traverse(SimEngine *self, visitproc visit, void *arg) {
    Py_VISIT(self->net);
    Py_VISIT(self->main_greenlet);
    Py_VISIT(self->progress);
    Py_VISIT(self->phantom);
    for (int r = 0; r < self->num_ranks; r++) Py_VISIT(self->ranks[r].greenlet);
    return 0;
}

static int SimEngine_clear(SimEngine *self) {
    drop_messages(self);
    for (int r = 0; r < self->num_ranks; r++) Py_CLEAR(self->ranks[r].greenlet);
    Py_CLEAR(self->main_greenlet);
    Py_CLEAR(self->progress);
    Py_CLEAR(self->phantom);
    Py_CLEAR(self->net);
    return 0;
}

static void SimEngine_dealloc(SimEngine *self) {
    PyObject_GC_UnTrack(self);
    if (self->ranks) SimEngine_clear(self);
    PyMem_Free(self->ranks);
    PyMem_Free(self->heap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *SimEngine_time_of(SimEngine *self, PyObject *arg) {
    int r = PyLong_AsLong(arg);
    if (r == -1 && PyErr_Occurred()) return NULL;
    if (check_rank(r, self->num_ranks, "time_of") < 0) return NULL;
    return PyFloat_FromDouble(self->ranks[r].t);
}

static PyObject *SimEngine_set_greenlet(SimEngine *self, PyObject *args) {
    int r;
    PyObject *glet;
    if (!PyArg_ParseTuple(args, "iO", &r, &glet)) return NULL;
    if (r == -1) {
        Py_XSETREF(self->main_greenlet, Py_NewRef(glet));
        Py_RETURN_NONE;
    }
    if (check_rank(r, self->num_ranks, "set_greenlet") < 0) return NULL;
    Py_XSETREF(self->ranks[r].greenlet, Py_NewRef(glet));
    Py_RETURN_NONE;
}

static PyObject *SimEngine_run_events(SimEngine *self, PyObject *unused) {
    while (self->heap_len && !self->failed) {
        Event ev = pop_event(self);
        int nxt = run_event(self, &ev);
        if (nxt == -2) return NULL;
        if (nxt >= 0 && call_switch(self->ranks[nxt].greenlet) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *SimEngine_close(SimEngine *self, PyObject *unused) {
    drop_messages(self);
    for (int r = 0; r < self->num_ranks; r++) Py_CLEAR(self->ranks[r].greenlet);
    Py_CLEAR(self->main_greenlet);
    Py_RETURN_NONE;
}

static PyMethodDef SimEngine_methods[] = {
    {"time_of", (PyCFunction)SimEngine_time_of, METH_O, "time_of(rank) -> that rank's virtual time, seconds."},
    {"set_greenlet", (PyCFunction)SimEngine_set_greenlet, METH_VARARGS,
     "set_greenlet(rank, greenlet): the greenlet that runs that rank (rank -1: the main one)."},
    {"run_events", (PyCFunction)SimEngine_run_events, METH_NOARGS,
     "Run events in order, switching to each rank one wakes, until none is left or `failed` is set."},
    {"close", (PyCFunction)SimEngine_close, METH_NOARGS,
     "Drop the events and messages left and the greenlets (the end of a run)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef SimEngine_members[] = {
    {"now", T_DOUBLE, offsetof(SimEngine, now), READONLY, "the time of the last event run, seconds"},
    {"num_events", T_LONGLONG, offsetof(SimEngine, num_events), READONLY, NULL},
    {"num_messages", T_LONGLONG, offsetof(SimEngine, num_messages), READONLY, NULL},
    {"num_switches", T_LONGLONG, offsetof(SimEngine, num_switches), READONLY, NULL},
    {"num_ranks", T_INT, offsetof(SimEngine, num_ranks), READONLY, NULL},
    {"fold", T_INT, offsetof(SimEngine, fold), READONLY, "0: every rank runs; 1, 2: rank 0 stands for all"},
    {"network", T_OBJECT, offsetof(SimEngine, net), READONLY, NULL},
    {"starting", T_BOOL, offsetof(SimEngine, starting), 0, "ranks still start: a blocking rank returns to main"},
    {"failed", T_BOOL, offsetof(SimEngine, failed), 0, "a rank raised: run_events stops"},
    {"progress", T_OBJECT, offsetof(SimEngine, progress), 0,
     "progress(engine), called every 65536 events of a long run (None: never)"},
    {"phantom", T_OBJECT, offsetof(SimEngine, phantom), 0, "phantom(count, dtype): a data-free array"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SimEngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.SimEngine",
    .tp_basicsize = sizeof(SimEngine),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SimEngine(network, reduce_s_per_byte=0.0, fold=0): the event queue and the ranks' clocks and inboxes.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SimEngine_init,
    .tp_dealloc = (destructor)SimEngine_dealloc,
    .tp_traverse = (traverseproc)SimEngine_traverse,
    .tp_clear = (inquiry)SimEngine_clear,
    .tp_methods = SimEngine_methods,
    .tp_members = SimEngine_members,
};

/* ------------------------------------------------------------------------------ message */

static PyObject *str_nbytes, *str_dtype, *str_shape, *str_copy, *str_array, *kind_array, *kind_obj;
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
    if (r->t < m->arrival) r->t = m->arrival;
}

static PyObject *SimMessage_landed(SimMessage *self, PyObject *unused) {
    landed(self);
    Py_RETURN_NONE;
}

static PyObject *SimMessage_array(SimMessage *self, PyObject *unused) {
    landed(self);
    if (self->engine->phantom == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SimMessage.array: the engine has no phantom()");
        return NULL;
    }
    PyObject *args[2] = {self->count_obj, self->dtype};
    return PyObject_Vectorcall(self->engine->phantom, args, 2, NULL);
}

static PyObject *SimMessage_copy_into(SimMessage *self, PyObject *out) {
    landed(self);
    Py_RETURN_NONE;
}

/* reduce_into(target, ufunc, base=None): data-free, the reduction only costs its time. */
static PyObject *SimMessage_reduce_into(SimMessage *self, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames) {
    if (nargs < 2 || nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0) > 3) {
        PyErr_SetString(PyExc_TypeError, "reduce_into(target, ufunc, base=None)");
        return NULL;
    }
    landed(self);
    SimEngine *e = self->engine;
    if (e->reduce_s_per_byte) {
        PyObject *nb = PyObject_GetAttr(args[0], str_nbytes);
        if (!nb) return NULL;
        long long nbytes = PyLong_AsLongLong(nb);
        Py_DECREF(nb);
        if (nbytes == -1 && PyErr_Occurred()) return NULL;
        double seconds = (double)nbytes * e->reduce_s_per_byte;
        if (seconds && compute(e, self->receiver, seconds) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *SimMessage_obj(SimMessage *self, PyObject *unused) {
    landed(self);
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
        if (block(e, self->sender) < 0) return NULL;
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
    {"release", (PyCFunction)SimMessage_landed, METH_NOARGS, "Taken: the receiver's clock moves to the arrival."},
    {"detach", (PyCFunction)SimMessage_detach, METH_NOARGS, "Nothing to detach from."},
    {"array", (PyCFunction)SimMessage_array, METH_NOARGS, "A phantom array of the message's length."},
    {"owned_array", (PyCFunction)SimMessage_array, METH_NOARGS, "A phantom array of the message's length."},
    {"copy_into", (PyCFunction)SimMessage_copy_into, METH_O, "Data-free: only takes the message at its arrival."},
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
    if (check_rank(rank, ((SimEngine *)engine)->num_ranks, "SimTransport") < 0) return -1;
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

/* Post a message at the sender's time: transmit it right away when nothing can happen before that
 * time any more (no event due earlier), else as an event. Steals `payload`; a new reference. */
static PyObject *post(SimTransport *self, PyObject *dst_obj, PyObject *tag, PyObject *kind, PyObject *dtype,
                      PyObject *shape, long long nbytes, PyObject *payload) {
    SimEngine *e = self->engine;
    int dst = PyLong_AsLong(dst_obj);
    if ((dst == -1 && PyErr_Occurred()) || check_rank(dst, e->num_ranks, "send") < 0) {
        Py_DECREF(payload);
        return NULL;
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
        err = transmit(e, m) < 0;
    } else {
        err = post_event(e, t, EV_TRANSMIT, self->rank, m, 0.0) < 0;
    }
    if (err) {
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}

static PyObject *post_array(SimTransport *self, PyObject *dst, PyObject *tag, PyObject *x, PyObject *payload) {
    PyObject *dtype = PyObject_GetAttr(x, str_dtype), *shape = NULL, *nb = NULL, *res = NULL;
    if (!dtype || !(shape = PyObject_GetAttr(x, str_shape)) || !(nb = PyObject_GetAttr(x, str_nbytes))) goto done;
    long long nbytes = PyLong_AsLongLong(nb);
    if (nbytes == -1 && PyErr_Occurred()) goto done;
    res = post(self, dst, tag, kind_array, dtype, shape, nbytes, payload);
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
    return post_array(self, args[0], args[1], args[2], payload);
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
    PyObject *res = post_array(self, dst, args[1], x, self->data ? Py_NewRef(x) : Py_NewRef(Py_None));
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
                Py_NewRef(args[2]));
}

static PyObject *SimTransport_receive(SimTransport *self, PyObject *arg) {
    SimEngine *e = self->engine;
    Rank *me = &e->ranks[self->rank];
    if (!me->head) {
        long timeout_ms = PyLong_AsLong(arg);
        if (timeout_ms == -1 && PyErr_Occurred()) return NULL;
        if (timeout_ms <= 0) Py_RETURN_NONE;
        me->waiting = 1;
        if (block(e, self->rank) < 0) return NULL; /* until a delivery wakes it */
        me->waiting = 0;
        if (!me->head) {
            PyErr_SetString(PyExc_RuntimeError, "simulation: a rank resumed with an empty inbox");
            return NULL;
        }
    }
    SimMessage *m = me->head;
    me->head = m->next;
    if (!me->head) me->tail = NULL;
    m->next = NULL;
    return (PyObject *)m;
}

static PyObject *SimTransport_close(SimTransport *self, PyObject *unused) { Py_RETURN_NONE; }

static PyMethodDef SimTransport_methods[] = {
    {"send", (PyCFunction)(void (*)(void))SimTransport_send, METH_FASTCALL,
     "send(dst, tag, x) -> a SimMessage (its own completion); never blocks."},
    {"reserve", (PyCFunction)(void (*)(void))SimTransport_reserve, METH_FASTCALL,
     "reserve(dst, count, dtype) -> space for an array to fill, then send_reserved."},
    {"send_reserved", (PyCFunction)(void (*)(void))SimTransport_send_reserved, METH_FASTCALL,
     "send_reserved(out, tag) -> a SimMessage."},
    {"send_obj", (PyCFunction)(void (*)(void))SimTransport_send_obj, METH_FASTCALL,
     "send_obj(dst, tag, body) -> a SimMessage."},
    {"receive", (PyCFunction)SimTransport_receive, METH_O,
     "receive(timeout_ms) -> the next delivered message; waits (in virtual time) unless timeout_ms <= 0."},
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
    if (!(str_nbytes = PyUnicode_InternFromString("nbytes")) || !(str_dtype = PyUnicode_InternFromString("dtype")) ||
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
