/*
 * The Communicator's C base (comm_core.c) and its op record (oprecord.c): the struct they share and
 * the flight ring's layout, which playground/comm/flight.py reads back (FLIGHT_DTYPE there mirrors
 * flight_entry here, field by field; a test holds the two together).
 */
#ifndef PLAYGROUND_COMM_CORE_H
#define PLAYGROUND_COMM_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* ------------------------------------------------------------------ the flight ring's layout */

#define FLIGHT_VERSION 1
#define FLIGHT_HEADER_BYTES 256
#define FLIGHT_NAME_BYTES 56
#define FLIGHT_ALGORITHM_BYTES 16

enum { KIND_COLLECTIVE = 1, KIND_SEND = 2, KIND_RECV = 3 };
enum { STATE_SCHEDULED = 1, STATE_STARTED = 2, STATE_COMPLETED = 3, STATE_FAILED = 4 };

/* One operation, 160 bytes. `record` is written last when an entry is (re)filled and set to 0 first,
 * so a reader that finds the same nonzero `record` before and after copying an entry has a whole one. */
typedef struct {
    uint64_t record;    /* the entry's number on this rank (from 1): its slot is (record - 1) % capacity */
    uint64_t seq;       /* a collective's number on the communicator (as errors say "#17"), a p2p op's */
    uint64_t group_seq; /* a matched collective's number among its group's (0: not matched) */
    int64_t t_begin_ns; /* CLOCK_MONOTONIC_COARSE (the host's monotonic clock, a few ms resolution) */
    int64_t t_end_ns;   /* 0 while it runs */
    int64_t t_wait_ns;  /* when its wait for `peer` began (0: it has not waited a whole slice) */
    int64_t nbytes;     /* the input's bytes (-1: not known) */
    int32_t group;      /* the group's tag offset (0: the whole communicator) */
    int32_t peer;       /* p2p: the peer; a collective: the peer it waits for (-1: none) */
    int32_t tag;        /* the tag (logical, unsalted) of the p2p op or of the wait */
    uint32_t fingerprint;
    uint8_t kind, state;
    char dtype[6];      /* numpy's dtype.str, e.g. "<f4" */
    char op[8];         /* the reduction, e.g. "sum" */
    char algorithm[FLIGHT_ALGORITHM_BYTES];
    char name[FLIGHT_NAME_BYTES];
} flight_entry;

typedef struct {
    char magic[8]; /* "PGFLIGHT" */
    uint32_t version, entry_bytes, capacity;
    int32_t rank, size, pid;
    uint64_t records; /* entries written so far: the newest is `records` */
    uint64_t active;  /* the record of the collective running now (0: none) */
    int64_t created_ns;
    /* up to FLIGHT_HEADER_BYTES: reserved */
} flight_header;

/* ------------------------------------------------------------------ the communicator's fields */

#define OP_DEPTH 8 /* collectives nested this deep keep their frame (a labelled region around one) */

typedef struct {
    PyObject *name, *algorithm; /* owned; NULL in an empty frame */
    uint64_t seq, record, group_seq;
    int64_t nbytes;
    int32_t group;
    uint32_t fingerprint;
    long tag_shift; /* what this collective subtracts from a tag (its salt, shifted); 0: unmatched */
    char dtype[8], op[8];
} op_frame;

/* Every field Python reads is an object member (T_OBJECT_EX): Python 3.11 specialises those into a
 * load at an offset (LOAD_ATTR_SLOT), not int members, which a collective's `comm.rank` and
 * `comm.size` would then pay for on every read. */
typedef struct {
    PyObject_HEAD
    PyObject *rank, *size, *bytes_sent, *bytes_received; /* ints */
    PyObject *tracer, *transport, *land, *exchange, *lend, *pending;
    char fast; /* 0: every call takes the Python path (a test compares both) */
    /* the op record (oprecord.c) */
    op_frame stack[OP_DEPTH];
    int depth;
    op_frame last;
    uint64_t num_ops, num_p2p, group0_seq;
    long tag_shift;          /* the running matched collective's: subtracted from its tags */
    long salted_from[4], salted_shift[4]; /* tags salted lately, and what they became (a cache) */
    PyObject *salted_to[4];
    int salted_next;
    /* the last matched collective's inputs and fingerprint: a loop of the same call hashes nothing */
    PyObject *memo_name, *memo_algorithm, *memo_dtype, *memo_op; /* owned */
    int64_t memo_nbytes;
    op_frame memo; /* its fingerprint, tag_shift, nbytes, dtype and op texts (no names held) */
    char memo_valid;
    Py_buffer ring_view;     /* the flight ring's memory (a file mapped by flight.py), when attached */
    flight_header *ring;
    flight_entry *entries;
    uint64_t ring_mask;
} CommCore;

/* oprecord.c */
extern PyMethodDef oprecord_methods[];
extern PyGetSetDef oprecord_getset[];
int oprecord_init(void);
void oprecord_clear(CommCore *self);
PyObject *wire_tag(CommCore *self, PyObject *tag);
uint64_t record_p2p(CommCore *self, int kind, PyObject *peer, PyObject *tag, PyObject *array, int state);
void record_done(CommCore *self, uint64_t record, int state);

#endif
