/*
 * SimNetwork: the ports of playground/sim/network.py's model (its docstring is the reference): a
 * message holds the sender's out-port and the receiver's in-port for n / beta from when both are free
 * and arrives alpha after its last byte left; or, on a host with per-message costs, it arrives its size
 * range's latency after the sender's CPU is done with it. Every simulated message goes through here,
 * so this is C (sim.h says why). The shared cores' scheduler is sim_cpu.c's.
 */
#include "sim.h"

static inline double max2(double a, double b) { return b > a ? b : a; }

int host_range(const HostCosts *h, long long nbytes) {
    int k = 0;
    while (k + 1 < h->num && h->from_bytes[k + 1] <= nbytes) k++;
    return k;
}

/* network.py's Network.transmit: (time the last byte left, arrival) of a message from src to dst posted
 * at `now`, through the in-port of `in_rank` (dst; src itself when folded: fold.py). With host costs the
 * message crosses no port: the CPUs moved its bytes (sim_transport.c charges them), and it arrives
 * its range's latency later. */
void net_transmit(SimNetwork *net, int src, int dst, int in_rank, long long nbytes, double now,
                         double *done_s, double *arrival_s) {
    int kind = src / net->ranks_per_node != dst / net->ranks_per_node;
    if (kind)
        net->bytes_between_nodes += nbytes;
    else
        net->bytes_within_nodes += nbytes;
    if (net->host.num) {
        int k = host_range(&net->host, nbytes);
        *done_s = now;
        *arrival_s = now + net->host.latency_s[k] + (double)nbytes * net->host.latency_s_per_byte[k];
        return;
    }
    double *out = net->out[kind], *in = net->in[kind];
    double start = max2(max2(now, out[src]), in[in_rank]);
    double done = start + (double)nbytes / net->beta[kind];
    out[src] = in[in_rank] = done;
    *done_s = done;
    *arrival_s = done + net->alpha_s[kind];
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
        self->running = PyMem_Calloc(cores, sizeof(Activity));
        self->queue = PyMem_Calloc(n, sizeof(Activity));
        self->request = PyMem_Calloc(3 * (size_t)n, sizeof(double));
        self->flows = PyMem_Calloc(cores, sizeof(Activity *));
        self->asleep = PyMem_Calloc(n, 1);
        self->home = PyMem_Calloc(n, sizeof(int));
        self->last_rank = PyMem_Calloc(cores, sizeof(int));
        if (!self->running || !self->queue || !self->request || !self->flows || !self->asleep || !self->home ||
            !self->last_rank) {
            PyErr_NoMemory();
            return -1;
        }
        for (int c = 0; c < cores; c++) self->running[c].rank = self->last_rank[c] = -1;
        for (int r = 0; r < n; r++) self->home[r] = r % cores;
    }
    return 0;
}

static void SimNetwork_dealloc(SimNetwork *self) {
    for (int k = 0; k < 2; k++) {
        PyMem_Free(self->out[k]);
        PyMem_Free(self->in[k]);
    }
    PyMem_Free(self->running);
    PyMem_Free(self->queue);
    PyMem_Free(self->request);
    PyMem_Free(self->flows);
    PyMem_Free(self->asleep);
    PyMem_Free(self->home);
    PyMem_Free(self->last_rank);
    PyMem_Free(self->py_mark);
    PyMem_Free(self->py_owed);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

int sim_check_rank(int rank, int n, const char *what) {
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
    if (sim_check_rank(src, self->num_ranks, "transmit") < 0 || sim_check_rank(dst, self->num_ranks, "transmit") < 0)
        return NULL;
    net_transmit(self, src, dst, dst, nbytes, now, &done, &arrival);
    return Py_BuildValue("(dd)", done, arrival);
}

static int read_doubles(PyObject *seq, double *out, int num, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != num) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "set_host: %s needs %d values", what, num);
        return -1;
    }
    for (int i = 0; i < num; i++) {
        out[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

static PyObject *SimNetwork_set_host(SimNetwork *self, PyObject *args) {
    PyObject *from, *ss, *sb, *rs, *rb, *ls, *lb, *ws = NULL;
    double python_scale = 0.0;
    if (!PyArg_ParseTuple(args, "OOOOOOO|dO", &from, &ss, &sb, &rs, &rb, &ls, &lb, &python_scale, &ws)) return NULL;
    Py_ssize_t num = PySequence_Size(from);
    if (num < 0) return NULL;
    if (num < 1 || num > MAX_RANGES) {
        PyErr_Format(PyExc_ValueError, "set_host: 1 to %d size ranges, got %zd", MAX_RANGES, num);
        return NULL;
    }
    HostCosts h = {(int)num};
    double starts[MAX_RANGES];
    if (read_doubles(from, starts, h.num, "from_bytes") < 0 || read_doubles(ss, h.send_s, h.num, "send_s") < 0 ||
        read_doubles(sb, h.send_s_per_byte, h.num, "send_s_per_byte") < 0 ||
        read_doubles(rs, h.recv_s, h.num, "recv_s") < 0 ||
        read_doubles(rb, h.recv_s_per_byte, h.num, "recv_s_per_byte") < 0 ||
        read_doubles(ls, h.latency_s, h.num, "latency_s") < 0 ||
        read_doubles(lb, h.latency_s_per_byte, h.num, "latency_s_per_byte") < 0 ||
        (ws && ws != Py_None && read_doubles(ws, h.wait_s, h.num, "wait_s") < 0))
        return NULL;
    for (int k = 0; k < h.num; k++) {
        h.from_bytes[k] = (long long)starts[k];
        if ((k == 0 && h.from_bytes[0] != 0) || (k > 0 && h.from_bytes[k] <= h.from_bytes[k - 1])) {
            PyErr_SetString(PyExc_ValueError, "set_host: from_bytes starts at 0 and increases");
            return NULL;
        }
    }
    self->host = h;
    if (python_scale > 0 && !self->py_mark) {
        self->py_mark = PyMem_Calloc(self->num_ranks, sizeof(double));
        self->py_owed = PyMem_Calloc(self->num_ranks, sizeof(double));
        if (!self->py_mark || !self->py_owed) return PyErr_NoMemory();
    }
    self->python_scale = python_scale > 0 ? python_scale : 0.0;
    Py_RETURN_NONE;
}

static PyObject *SimNetwork_set_cores(SimNetwork *self, PyObject *args) {
    double slice_s, memory, copy_demand, reduce_demand, wake_s = 0.0, copy_s_per_byte = 0.0, migrate_s = 0.0;
    double stream_window = 0.0, message_copy_s_per_byte = 0.0; /* 0: copy_s_per_byte's */
    double switch_s = 0.0;
    if (!PyArg_ParseTuple(args, "dddd|dddddd", &slice_s, &memory, &copy_demand, &reduce_demand, &wake_s,
                          &copy_s_per_byte, &migrate_s, &stream_window, &message_copy_s_per_byte, &switch_s))
        return NULL;
    if (!self->num_cores) {
        PyErr_SetString(PyExc_ValueError, "set_cores: the network has no shared cores");
        return NULL;
    }
    if (slice_s < 0 || memory < 0 || copy_demand < 0 || reduce_demand < 0 || wake_s < 0 || copy_s_per_byte < 0 ||
        migrate_s < 0 || stream_window < 0 || switch_s < 0) {
        PyErr_SetString(PyExc_ValueError, "set_cores: every value >= 0");
        return NULL;
    }
    self->slice_s = slice_s, self->memory_bytes_per_s = memory;
    self->copy_demand = copy_demand, self->reduce_demand = reduce_demand, self->wake_s = wake_s;
    self->copy_s_per_byte = copy_s_per_byte;
    self->message_copy_s_per_byte = message_copy_s_per_byte > 0 ? message_copy_s_per_byte : copy_s_per_byte;
    self->per_core = migrate_s > 0, self->migrate_s = migrate_s, self->stream_window = stream_window;
    self->switch_s = switch_s;
    Py_RETURN_NONE;
}

static PyMethodDef SimNetwork_methods[] = {
    {"transmit", (PyCFunction)SimNetwork_transmit, METH_VARARGS,
     "transmit(src, dst, nbytes, now) -> (time its last byte left, arrival): reserve the ports."},
    {"set_host", (PyCFunction)SimNetwork_set_host, METH_VARARGS,
     "set_host(from_bytes, send_s, send_s_per_byte, recv_s, recv_s_per_byte, latency_s, latency_s_per_byte, "
     "python_scale=0, wait_s=None): a host's per-message costs by size range (each a sequence of one value per "
     "range; wait_s: the receiver's CPU more when it waited for the message); with python_scale > 0, the CPU "
     "time each rank's own code takes between its calls is charged to it, times that."},
    {"set_cores", (PyCFunction)SimNetwork_set_cores, METH_VARARGS,
     "set_cores(slice_s, memory_bytes_per_s, copy_demand, reduce_demand, wake_s=0, copy_s_per_byte=0, "
     "migration_cost_s=0, stream_window_bytes=0, message_copy_s_per_byte=0 (copy_s_per_byte's), switch_s=0): the "
     "shared cores' time slice, the memory bandwidth their copies share (0: none, unlimited), how long a rank "
     "that slept waiting for a message takes to start on an idle core, a local copy's cost per byte, and with "
     "migration_cost_s > 0 a run queue per core (an idle core takes another's waiting rank after that long); "
     "a streamed swap's window (each of its turns a wake-up when ranks sleep), and what a core pays to go on "
     "with another rank than the one it last ran."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef SimNetwork_members[] = {
    {"bytes_within_nodes", T_LONGLONG, offsetof(SimNetwork, bytes_within_nodes), READONLY, NULL},
    {"bytes_between_nodes", T_LONGLONG, offsetof(SimNetwork, bytes_between_nodes), READONLY, NULL},
    {"num_ranks", T_INT, offsetof(SimNetwork, num_ranks), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject SimNetworkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.SimNetwork",
    .tp_basicsize = sizeof(SimNetwork),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "SimNetwork(num_ranks, ranks_per_node, intra_alpha_s, intra_beta_bytes_per_s, inter_alpha_s, "
              "inter_beta_bytes_per_s, cores=0): the ports, host costs and shared cores of network.py's model.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SimNetwork_init,
    .tp_dealloc = (destructor)SimNetwork_dealloc,
    .tp_methods = SimNetwork_methods,
    .tp_members = SimNetwork_members,
};
