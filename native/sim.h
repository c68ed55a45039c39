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
 *                 arrives alpha after its last byte left; on a calibrated host (HostCosts) no
 *                 ports: the sender's and receiver's CPU work by size range, and a latency.
 *   shared cores  (sim_cpu.c) CPU work queues for C cores (one, or one per core with migrations),
 *                 with time slices and max-min shares of the memory bandwidth.
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
 * Files, each calling only those before it (tests/test_layers.py holds it): sim_events.c (the event
 * queue), sim_network.c (SimNetwork), sim_cpu.c (shared cores), sim_engine.c (SimEngine),
 * sim_transport.c (SimMessage, SimTransport), as playground/sim/network.py, engine.py and transport.py.
 */
#ifndef PLAYGROUND_SIM_H
#define PLAYGROUND_SIM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>

#define PROGRESS_EVENTS (1 << 16) /* progress(engine) every this many events of a long run */

enum { EV_TRANSMIT, EV_RESUME, EV_CPU, EV_CORE }; /* EV_CPU: a rank asks for a core; EV_CORE: sim_cpu.c's next change */

#define MAX_RANGES 16 /* size ranges of a host's per-message costs */

/* Folded (fold.py): rank 0 alone runs, and each message it sends to d comes back to it as the one
 * its image sends it: from -d (mod N) under rotations, from d under XOR translations. */
enum { FOLD_NONE, FOLD_ROTATION, FOLD_XOR };

typedef struct SimMessage SimMessage;

typedef struct {
    double t;       /* when it runs, virtual seconds */
    uint64_t seq;   /* posting order: ties run first-posted first */
    SimMessage *msg; /* EV_TRANSMIT: the message (a reference) */
    double seconds; /* EV_CORE: the generation it was posted in */
    int32_t kind;
    int32_t rank;   /* EV_RESUME, EV_CPU: whose (its request is in SimNetwork.request) */
} Event;

typedef struct {
    double t;               /* this rank's clock; never behind the engine's `now` */
    SimMessage *head, *tail; /* delivered, not yet taken: in delivery (= sending-time) order */
    PyObject *greenlet;     /* the greenlet running it */
    int waiting;            /* blocked until a delivery wakes it */
} Rank;

/* A host's per-message costs (playground/sim/network.py's HostModel), by size range: range k holds
 * messages of from_bytes[k] bytes up to the next range's. The sender's and the receiver's CPU
 * (fixed, and per byte for a copy in or out: memory-bound work), then the latency between them. */
typedef struct {
    int num; /* ranges; 0: no host costs (messages cross ports) */
    long long from_bytes[MAX_RANGES];
    double send_s[MAX_RANGES], send_s_per_byte[MAX_RANGES];
    double recv_s[MAX_RANGES], recv_s_per_byte[MAX_RANGES];
    double latency_s[MAX_RANGES], latency_s_per_byte[MAX_RANGES];
    double wait_s[MAX_RANGES]; /* the receiver's CPU more when it slept waiting for the message: its wake-up */
} HostCosts;

/* A piece of CPU work on a shared core: `fixed_s` at full speed, then `mem_s` (seconds alone) of
 * memory-bound work that moves `demand` bytes/s of memory traffic when alone and slows down when the
 * running copies together ask for more than the machine's memory bandwidth (max-min shares). */
typedef struct {
    int rank; /* whose (-1: a free core) */
    double fixed_s, mem_s, demand, slice_left, speed;
    double queued_t; /* when it last started waiting for a core */
    int woke;        /* it slept on a receive before asking (its transport sleeps: wake_s > 0) */
} Activity;

typedef struct {
    PyObject_HEAD
    int num_ranks, ranks_per_node, num_cores;
    double alpha_s[2], beta[2]; /* [0] inside a node, [1] between nodes */
    double *out[2], *in[2];     /* per link kind: when each rank's out-/in-port is free */
    long long bytes_within_nodes, bytes_between_nodes;
    HostCosts host;
    /* shared cores (num_cores > 0): sim_cpu.c's processor scheduler */
    Activity *running;          /* num_cores slots */
    Activity **flows;           /* num_cores: scratch for the memory shares */
    Activity *queue;            /* waiting for a core, first come first served: a ring of num_ranks */
    int queue_head, queue_len;
    int per_core;               /* run queues per core: a rank waits for its own core (`home`) ... */
    double migrate_s;           /* ... unless it has waited this long and another core is idle */
    int *home;                  /* per rank: the core it last ran on */
    int *last_rank;             /* per core: the rank it last ran (-1: none yet) */
    double switch_s;            /* a core that goes on with another rank than the one it last ran: a context switch */
    double *request;            /* per rank: the (fixed_s, mem_s, demand) it asked for */
    double cpu_t;               /* running activities are accounted up to here */
    double slice_s;             /* a time slice (0: none): beyond it a waiting rank goes first */
    double memory_bytes_per_s;  /* memory traffic all cores share (0: unlimited) */
    double copy_demand, reduce_demand; /* bytes/s of memory traffic of one copy, one reduction alone */
    double wake_s;              /* a rank that slept waiting starts this much later on an idle core */
    double copy_s_per_byte;     /* a local copy of a buffer (chunks.copy of a phantom), per byte */
    double message_copy_s_per_byte; /* a message's copy in or out, per byte (what a streamed send halves) */
    double stream_window;       /* bytes a streamed swap moves per turn (0: none); each turn a wake-up when ranks sleep */
    /* timed Python (SMPI's way: computation runs for real and is timed): with `python_scale` > 0, the
     * CPU time a rank's own code takes between its calls into the simulator is charged to it */
    double python_scale;
    double *py_mark, *py_owed;  /* per rank: thread CPU time at its last return, owed seconds */
    char *asleep;               /* per rank: it blocked waiting for a message (and sleeps, wake_s > 0) */
    uint64_t cpu_gen;           /* the pending EV_CORE's generation (older ones are stale) */
} SimNetwork;

typedef struct {
    PyObject_HEAD
    SimNetwork *net;
    Rank *ranks;
    int num_ranks;
    int starting; /* ranks still to start at time 0: nothing runs before they have */
    int failed;   /* a rank raised: the main loop stops */
    int fold;     /* FOLD_*: one rank stands for all (fold.py) */
    int current;  /* the rank whose greenlet runs (-1: the main one) */
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
    char charged;             /* the receiver's CPU for it is accounted (host costs) */
    char streamed;            /* half of a streamed swap: its bytes pass through a window in the caches */
    char waited;              /* its receiver had to wait for it (it slept, where its transport sleeps) */
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
int host_range(const HostCosts *h, long long nbytes); /* the range of an n-byte message */

/* sim_events.c: the event queue, the bottom of the event core (0, or -1 with an exception set) */
int sim_post_event(SimEngine *e, double t, int kind, int rank, SimMessage *msg, double seconds);
Event sim_pop_event(SimEngine *e); /* the earliest; the heap is not empty */

/* sim_cpu.c: shared cores, over the event queue only (each returns 0, or -1 with an exception set) */
int cpu_request(SimEngine *e, int rank);  /* EV_CPU: `rank` asks for its request */
int cpu_update(SimEngine *e, double gen); /* EV_CORE: an activity ends or its slice does */
int cpu_ask(SimEngine *e, int rank, double fixed_s, double mem_s, double demand); /* 1: now block `rank` */
void py_charge(SimNetwork *net, int rank); /* timed Python: what `rank` ran since its last return */
void py_mark(SimNetwork *net, int rank);   /* timed Python: `rank` returns to its own code now */

/* sim_engine.c: running the events, blocking a rank; each returns 0, or -1 with an exception set */
int sim_transmit(SimEngine *e, SimMessage *msg);
int sim_block(SimEngine *e, int me);
int sim_work(SimEngine *e, int rank, double fixed_s, double mem_s, double demand); /* blocks `rank` */
int sim_compute(SimEngine *e, int rank, double seconds); /* a reduction: memory-bound */

int add_sim_types(PyObject *module); /* sim_transport.c: every type above, into the module */

#endif
