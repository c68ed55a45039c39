/*
 * sim.h: the simulator's event core (playground/sim/): the network's ports, the event queue, the ranks'
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
 *
 * Files: sim_network.c (SimNetwork), sim_engine.c (SimEngine), sim_transport.c (SimMessage,
 * SimTransport), as playground/sim/network.py, engine.py and transport.py.
 */
#ifndef PLAYGROUND_SIM_H
#define PLAYGROUND_SIM_H

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

typedef struct {
    PyObject_HEAD
    int num_ranks, ranks_per_node, num_cores;
    double alpha_s[2], beta[2]; /* [0] inside a node, [1] between nodes */
    double *out[2], *in[2];     /* per link kind: when each rank's out-/in-port is free */
    double *cores;              /* min-heap: when each shared core is free (NULL: a CPU per rank) */
    long long bytes_within_nodes, bytes_between_nodes;
} SimNetwork;

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

extern PyTypeObject SimNetworkType, SimEngineType;

int sim_check_rank(int rank, int n, const char *what); /* 0, or -1 with ValueError */

/* sim_network.c: network.py's model */
void net_transmit(SimNetwork *net, int src, int dst, int in_rank, long long nbytes, double now, double *done_s,
                  double *arrival_s);
double net_cpu(SimNetwork *net, double now, double seconds);

/* sim_engine.c: the event queue; each returns 0, or -1 with an exception set */
int sim_post_event(SimEngine *e, double t, int kind, int rank, SimMessage *msg, double seconds);
int sim_transmit(SimEngine *e, SimMessage *msg);
int sim_block(SimEngine *e, int me);
int sim_compute(SimEngine *e, int rank, double seconds);

int add_sim_types(PyObject *module); /* sim_transport.c: every type above, into the module */

#endif
