/*
 * SimNetwork: the ports and shared cores of playground/sim/network.py's model (its docstring is the
 * reference): a message holds the sender's out-port and the receiver's in-port for n / beta from when
 * both are free and arrives alpha after its last byte left; shared cores are a min-heap of when each
 * frees up. Every simulated message reserves ports, so this is C (sim.h says why).
 */
#include "sim.h"

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
void net_transmit(SimNetwork *net, int src, int dst, int in_rank, long long nbytes, double now,
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
double net_cpu(SimNetwork *net, double now, double seconds) {
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

PyTypeObject SimNetworkType = {
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
