/*
 * SimEngine: the ranks' records (clock, inbox, greenlet), the running of events in order (the queue
 * itself is sim_events.c's) and the blocking that switches straight to the rank the next event wakes,
 * as playground/sim/engine.py's docstring states them. Shared cores: sim_cpu.c, which this file calls
 * (a rank's work, the EV_CPU and EV_CORE events) and which calls nothing of it: the scheduler posts
 * events, and the caller of its `cpu_ask` blocks.
 */
#include "sim.h"

/* The event of a message's transmission: reserve its ports, deliver it to the receiver stamped with
 * its arrival, complete the send. A rank waiting for it (the receiver for a message, the sender for
 * its completion) is woken by an event at this time, so it runs after the events already due now, in
 * posting order like every other. 0, or -1 on error. */
int sim_transmit(SimEngine *e, SimMessage *msg) {
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
        if (sim_post_event(e, e->now, EV_RESUME, r, NULL, 0.0) < 0) return -1;
    }
    if (msg->waiter) { /* the sender waits for this send to complete */
        msg->waiter = 0;
        if (sim_post_event(e, e->now, EV_RESUME, msg->sender, NULL, 0.0) < 0) return -1;
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
        nxt = sim_transmit(e, ev->msg) < 0 ? -2 : -1;
        Py_DECREF(ev->msg);
        break;
    case EV_CPU:
        nxt = cpu_request(e, ev->rank) < 0 ? -2 : -1;
        break;
    case EV_CORE:
        nxt = cpu_update(e, ev->seconds) < 0 ? -2 : -1;
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
        Event ev = sim_pop_event(e);
        int nxt = run_event(e, &ev);
        if (nxt == -2) return -1;
        if (nxt < 0) continue;
        if (nxt == me) return 0;
        e->num_switches++;
        e->current = nxt;
        return call_switch(e->ranks[nxt].greenlet); /* back here when an event wakes `me` */
    }
    e->current = -1;
    return call_switch(e->main_greenlet); /* nothing left to run: the main loop reports the deadlock */
}

int sim_block(SimEngine *e, int me) {
    int err = block(e, me);
    e->current = me;
    py_mark(e->net, me); /* timed Python: what ran meanwhile was others' */
    return err;
}

/* `rank` (running) does `fixed_s` of CPU work and `mem_s` of memory-bound work: on its own CPU its
 * clock just moves; on shared cores it asks the scheduler (sim_cpu.c) at its time and waits until the
 * work is done. */
int sim_work(SimEngine *e, int rank, double fixed_s, double mem_s, double demand) {
    int asked = cpu_ask(e, rank, fixed_s, mem_s, demand);
    return asked == 1 ? sim_block(e, rank) : asked;
}

/* `rank` (running) reduces for `seconds` (alone): memory-bound work, on a free core if they are shared. */
int sim_compute(SimEngine *e, int rank, double seconds) {
    return sim_work(e, rank, 0.0, seconds, e->net->reduce_demand);
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
    self->current = -1;
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
    if (sim_check_rank(r, self->num_ranks, "time_of") < 0) return NULL;
    return PyFloat_FromDouble(self->ranks[r].t);
}

/* A local copy of `nbytes` by the running rank (chunks.copy of a phantom): its copy rate's time. */
static PyObject *SimEngine_local_copy(SimEngine *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "local_copy(nbytes, call_s=0.0)");
        return NULL;
    }
    long long nbytes = PyLong_AsLongLong(args[0]);
    if (nbytes == -1 && PyErr_Occurred()) return NULL;
    double call_s = nargs > 1 ? PyFloat_AsDouble(args[1]) : 0.0;
    if (call_s == -1.0 && PyErr_Occurred()) return NULL;
    SimNetwork *net = self->net;
    if (self->current < 0) Py_RETURN_NONE;
    double mem = net->copy_s_per_byte && nbytes > 0 ? (double)nbytes * net->copy_s_per_byte : 0.0;
    if (mem <= 0 && call_s <= 0) Py_RETURN_NONE;
    if (sim_work(self, self->current, call_s > 0 ? call_s : 0.0, mem, net->copy_demand) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *SimEngine_set_greenlet(SimEngine *self, PyObject *args) {
    int r;
    PyObject *glet;
    if (!PyArg_ParseTuple(args, "iO", &r, &glet)) return NULL;
    if (r == -1) {
        Py_XSETREF(self->main_greenlet, Py_NewRef(glet));
        Py_RETURN_NONE;
    }
    if (sim_check_rank(r, self->num_ranks, "set_greenlet") < 0) return NULL;
    Py_XSETREF(self->ranks[r].greenlet, Py_NewRef(glet));
    Py_RETURN_NONE;
}

static PyObject *SimEngine_run_events(SimEngine *self, PyObject *unused) {
    while (self->heap_len && !self->failed) {
        Event ev = sim_pop_event(self);
        int nxt = run_event(self, &ev);
        if (nxt == -2) return NULL;
        if (nxt >= 0) {
            self->current = nxt;
            if (call_switch(self->ranks[nxt].greenlet) < 0) return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *SimEngine_close(SimEngine *self, PyObject *unused) {
    drop_messages(self);
    for (int r = 0; r < self->num_ranks; r++) Py_CLEAR(self->ranks[r].greenlet);
    Py_CLEAR(self->main_greenlet);
    Py_RETURN_NONE;
}

static PyObject *SimEngine_compute(SimEngine *self, PyObject *args) {
    int rank;
    double fixed_s, mem_s = 0.0, demand = 0.0;
    if (!PyArg_ParseTuple(args, "id|dd", &rank, &fixed_s, &mem_s, &demand)) return NULL;
    if (sim_check_rank(rank, self->num_ranks, "compute") < 0) return NULL;
    if (fixed_s < 0 || mem_s < 0 || demand < 0) {
        PyErr_SetString(PyExc_ValueError, "compute: fixed_s, mem_s and demand must be >= 0");
        return NULL;
    }
    if (sim_work(self, rank, fixed_s, mem_s, demand) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef SimEngine_methods[] = {
    {"local_copy", (PyCFunction)(void (*)(void))SimEngine_local_copy, METH_FASTCALL,
     "local_copy(nbytes, call_s=0.0): the running rank copies nbytes in its own memory (at the host's copy "
     "rate), and works call_s more on its CPU (what the call costs beyond its timed Python)."},
    {"compute", (PyCFunction)SimEngine_compute, METH_VARARGS,
     "compute(rank, fixed_s, mem_s=0, demand=0): the running rank `rank` works: fixed_s of CPU, then mem_s "
     "(alone) of memory-bound work moving `demand` bytes/s; on shared cores it waits for one (sim_cpu.c)."},
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
    {"current", T_INT, offsetof(SimEngine, current), 0, "the rank whose greenlet runs (-1: none)"},
    {"fold", T_INT, offsetof(SimEngine, fold), READONLY, "0: every rank runs; 1, 2: rank 0 stands for all"},
    {"network", T_OBJECT, offsetof(SimEngine, net), READONLY, NULL},
    {"starting", T_BOOL, offsetof(SimEngine, starting), 0, "ranks still start: a blocking rank returns to main"},
    {"failed", T_BOOL, offsetof(SimEngine, failed), 0, "a rank raised: run_events stops"},
    {"progress", T_OBJECT, offsetof(SimEngine, progress), 0,
     "progress(engine), called every 65536 events of a long run (None: never)"},
    {"phantom", T_OBJECT, offsetof(SimEngine, phantom), 0, "phantom(count, dtype): a data-free array"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject SimEngineType = {
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
